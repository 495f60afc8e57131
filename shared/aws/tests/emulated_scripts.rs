//! The fixture expectation table and the scripted scenarios (`conformance/`) on the emulated
//! AWS stack and on the embedded host, through the testkit's one script runner: interrupts
//! (run-scoped, by token, legacy), quorum votes, refine, timeouts, cancel cascades and
//! pause/resume behave the same on both backends, event for event. Without the emulators
//! the suite is ignored (see `trellis_testkit::external`).

mod support;

use serde_json::Value;
use support::{embedded_host, require_emulators, stack, AwsDriver, KEY};
use trellis_testkit::script::Runner;
use trellis_testkit::HttpDriver;

const TABLE: &str = include_str!("../../../conformance/fixture-expectations.json");
const SCENARIOS: &str = include_str!("../../../conformance/scenarios.json");

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn every_script_gives_the_same_run_on_aws_as_embedded() {
    require_emulators();
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
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn of_racing_resolutions_on_aws_exactly_one_wins() {
    require_emulators();
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

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn the_v2_surface_is_served_through_api_gateway_too() {
    require_emulators();
    let mut aws = stack().await;
    let (status, created) = aws.api("POST", "/runs", Some(serde_json::json!({"workflowId": "conformance-noop"}))).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    assert!(run_id.starts_with("default/"), "{run_id}");
    let projected = run_id.replace('/', "~2F");
    aws.pump_until_terminal(run_id.split_once('/').unwrap().1, support::SPEC_DEADLINE, false).await;
    let (status, snapshot) = aws.api("GET", &format!("/runs/{projected}"), None).await;
    assert_eq!((status, snapshot["status"].as_str()), (200, Some("completed")), "{snapshot}");
    assert_eq!(snapshot["owner"]["subject"]["tenant"], "default");
    let (status, page) =
        aws.api("GET", &format!("/runs/{projected}/events/poll?afterSequence=0&timeout=0"), None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!((page["runId"].as_str(), page["isTerminal"].as_bool()), (Some(run_id.as_str()), Some(true)));
    assert!(page["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["schemaVersion"] == 1 && e["sequence"].as_u64() > Some(0)));
    let (status, refused) = aws.api("POST", &format!("/runs/{projected}/cancel"), None).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("run_terminal")));
}
