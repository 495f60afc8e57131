//! Human in the loop on a live embedded host: racing resolutions (one wins, the rest get
//! `409 interrupt_already_resolved`), cancel racing a resolve (exactly one wins, the run
//! converges), a suspended run surviving a restart and resolving afterwards by the token
//! minted before it, discovery's interrupt advertisement, and — with
//! `OPENWOP_REFERENCE_DIR` — every interrupt event, payload and snapshot against the official
//! schemas.

mod common;

use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, Client, Reference, KEY};
use serde_json::{json, Value};

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

async fn waiting(client: &Client, workflow: &str, status: &str) -> (String, Value) {
    let run_id = client.create(json!({"workflowId": workflow})).await;
    let snapshot = client.wait_status(&run_id, status, SPEC_DEADLINE).await;
    (run_id, snapshot)
}

#[tokio::test]
async fn of_racing_resolutions_exactly_one_wins() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let (run_id, _) = waiting(&client, "conformance-approval", "waiting-approval").await;
    let path = format!("/v1/runs/{run_id}/interrupts/gate");
    let body = json!({"resumeValue": {"action": "accept"}});
    let racers = (0..8).map(|_| client.request("POST", &path, Some(body.clone())));
    let answers = futures_util::future::join_all(racers).await;
    let mut statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409, 409, 409, 409, 409, 409, 409], "{answers:?}");
    for (_, body) in answers.iter().filter(|(status, _)| *status == 409) {
        assert_eq!(body["error"], "interrupt_already_resolved");
    }
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(types(&events).iter().filter(|t| *t == "interrupt.resolved").count(), 1);
    host.stop().await;
}

#[tokio::test]
async fn cancel_racing_a_resolve_converges_with_one_winner() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    for _ in 0..5 {
        let (run_id, _) = waiting(&client, "conformance-approval", "waiting-approval").await;
        let resolve_path = format!("/v1/runs/{run_id}/interrupts/gate");
        let cancel_path = format!("/v1/runs/{run_id}/cancel");
        let resolve_body = json!({"resumeValue": {"action": "accept"}});
        let (resolved, cancelled) = tokio::join!(
            client.request("POST", &resolve_path, Some(resolve_body)),
            client.request("POST", &cancel_path, None)
        );
        assert_eq!(cancelled.0, 200, "{cancelled:?}");
        let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
        match snapshot["status"].as_str() {
            Some("completed") => {
                assert_eq!(resolved.0, 200, "{resolved:?}");
                assert_eq!(cancelled.1["alreadyTerminal"], true, "{cancelled:?}");
            }
            Some("cancelled") => {
                assert_eq!(
                    (resolved.0, resolved.1["error"].as_str()),
                    (422, Some("interrupt_cancelled")),
                    "{resolved:?}"
                )
            }
            other => panic!("did not converge: {other:?}"),
        }
        assert_log_well_formed(&client.events(&run_id).await);
    }
    host.stop().await;
}

#[tokio::test]
async fn a_suspended_run_survives_a_restart_and_resolves_by_its_old_token() {
    let dir = tempfile::tempdir().unwrap();
    let host = start(serve_args(Some(dir.path()))).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let (run_id, snapshot) = waiting(&client, "conformance-interrupt-external-event", "waiting-external").await;
    let token = snapshot["interrupt"]["interruptToken"].as_str().unwrap().to_owned();
    assert_eq!(snapshot["interrupt"]["callbackUrl"], format!("/v1/interrupts/{token}"));
    host.stop().await;

    let host = start(serve_args(Some(dir.path()))).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    assert_eq!(client.snapshot(&run_id).await["status"], "waiting-external");
    let http = reqwest::Client::new();
    let inspected = http.get(format!("{base}/v1/interrupts/{token}")).send().await.unwrap();
    assert_eq!(inspected.status(), 200);
    let inspected: Value = inspected.json().await.unwrap();
    assert_eq!(
        (inspected["runId"].as_str(), inspected["kind"].as_str()),
        (Some(run_id.as_str()), Some("external-event"))
    );
    let resolved = http
        .post(format!("{base}/v1/interrupts/{token}"))
        .json(&json!({"resumeValue": {"orderId": "fixture-order-1", "status": "completed"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    assert_log_well_formed(&client.events(&run_id).await);
    host.stop().await;
}

#[tokio::test]
async fn discovery_advertises_interrupts_pause_and_the_universal_envelopes() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let text = reqwest::get(format!("{base}/.well-known/openwop")).await.unwrap().text().await.unwrap();
    assert!(!text.contains("\"edit\""), "the bare word edit must not appear in discovery");
    let discovery: Value = serde_json::from_str(&text).unwrap();
    let envelopes = json!(["clarification.request", "schema.request", "schema.response", "error"]);
    assert_eq!(discovery["supportedEnvelopes"], envelopes);
    for kind in envelopes.as_array().unwrap() {
        assert!(discovery["schemaVersions"][kind.as_str().unwrap()].is_u64(), "{kind}");
    }
    assert_eq!(discovery["interrupts"]["approvalActions"], json!(["accept", "reject", "refine", "edit-accept"]));
    let kinds = discovery["interrupts"]["supportedKinds"].as_array().unwrap();
    assert!(kinds.contains(&json!("external-event")) && !kinds.contains(&json!("conversation.start")));
    assert!(discovery.get("interrupt").is_none(), "no approver routing is advertised");
    assert_eq!(discovery["runs"]["pauseResume"]["drainPolicies"], json!(["immediate", "drain-current-node"]));
    let fixtures = discovery["fixtures"].as_array().unwrap();
    for id in ["conformance-approval", "conformance-clarification", "conformance-interrupt-quorum"] {
        assert!(fixtures.contains(&json!(id)), "{id} advertised");
    }
    host.stop().await;
}

#[tokio::test]
async fn a_conversation_kind_is_refused_at_registration() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let workflow = json!({"id": "talk", "name": "Talk", "nodes": [{"id": "c", "typeId": "core.interrupt",
        "config": {"kind": "conversation.start", "data": {"conversationId": "c-1"}}}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(workflow)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    assert_eq!(body["details"]["requiredCapability"], "conversationPrimitive");
    let bad_gate = json!({"id": "gate", "name": "Gate", "nodes": [{"id": "g", "typeId": "core.approvalGate",
        "config": {"actions": ["accept", "edit"]}}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(bad_gate)).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("validation_error")), "{body}");
    assert_eq!(body["details"]["nodeId"], "g");
    host.stop().await;
}

#[tokio::test]
async fn interrupt_events_and_snapshots_match_the_official_schemas() {
    let Some(reference) = Reference::load("interrupt_events_and_snapshots_match_the_official_schemas") else { return };
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let payloads = |name: &str| format!("run-event-payloads.schema.json#/$defs/{name}");
    let by_type = [
        ("node.suspended", payloads("nodeSuspended")),
        ("node.resumed", payloads("nodeResumed")),
        ("approval.requested", payloads("approvalRequested")),
        ("approval.received", payloads("approvalReceived")),
        ("clarification.requested", payloads("clarificationRequested")),
        ("clarification.resolved", payloads("clarificationResolved")),
        ("interrupt.resolved", payloads("interruptResolved")),
        ("interrupt.requested", "suspend-request.schema.json".to_owned()),
        ("run.paused", payloads("runPaused")),
        ("run.resumed", payloads("runResumed")),
    ];
    let runs = [
        ("conformance-approval", "waiting-approval", "gate", json!({"action": "accept"})),
        ("conformance-clarification", "waiting-input", "ask", json!({"answers": {"q1": "blue"}})),
        (
            "conformance-interrupt-external-event",
            "waiting-external",
            "wait-for-external",
            json!({"orderId": "fixture-order-1", "status": "completed"}),
        ),
    ];
    let mut checked = 0;
    for (workflow, status, node, value) in runs {
        let (run_id, snapshot) = waiting(&client, workflow, status).await;
        reference.assert_valid("run-snapshot.schema.json", &snapshot);
        reference.assert_valid("suspend-request.schema.json", &snapshot["interrupt"]["payload"]);
        let path = format!("/v1/runs/{run_id}/interrupts/{node}");
        assert_eq!(client.request("POST", &path, Some(json!({"resumeValue": value}))).await.0, 200);
        client.wait_terminal(&run_id, SPEC_DEADLINE).await;
        for event in client.events(&run_id).await {
            reference.assert_valid("run-event.schema.json", &event);
            if let Some((_, schema)) = by_type.iter().find(|(t, _)| event["type"] == *t) {
                reference.assert_valid(schema, &event["payload"]);
                checked += 1;
            }
        }
    }
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 500}})).await;
    client.wait_status(&run_id, "running", SPEC_DEADLINE).await;
    // Immediate: a drain pause would stay pending while the delay runs, and the resume below
    // would withdraw it without either event.
    let immediate = json!({"drainPolicy": "immediate"});
    assert_eq!(client.request("POST", &format!("/v1/runs/{run_id}:pause"), Some(immediate)).await.0, 202);
    reference.assert_valid("run-snapshot.schema.json", &client.snapshot(&run_id).await);
    assert_eq!(client.request("POST", &format!("/v1/runs/{run_id}:resume"), None).await.0, 202);
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    for event in client.events(&run_id).await {
        if let Some((_, schema)) = by_type.iter().find(|(t, _)| event["type"] == *t) {
            reference.assert_valid(schema, &event["payload"]);
            checked += 1;
        }
    }
    assert_eq!(checked, 18, "every interrupt and pause payload is checked");
    reference.assert_invalid(
        "suspend-request.schema.json",
        &json!({"kind": "approval", "key": "k", "data": {}, "nodeId": "x"}),
    );
    host.stop().await;
}

#[tokio::test]
async fn a_keyed_re_pause_replays_its_answer() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 3000}})).await;
    client.wait_status(&run_id, "running", SPEC_DEADLINE).await;
    let http = reqwest::Client::new();
    let pause = |key: &'static str| {
        http.post(format!("{base}/v1/runs/{run_id}:pause"))
            .bearer_auth(KEY)
            .header("Idempotency-Key", key)
            .json(&json!({"reason": "deploy", "drainPolicy": "immediate"}))
            .send()
    };
    let first = pause("pause-1").await.unwrap();
    assert_eq!(first.status(), 202);
    let first_body: Value = first.json().await.unwrap();
    let again = pause("pause-1").await.unwrap();
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["openwop-idempotent-replay"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first_body);
    let other = pause("pause-2").await.unwrap();
    assert_eq!(other.status(), 409);
    let other: Value = other.json().await.unwrap();
    assert_eq!(
        (other["error"].as_str(), other["details"]["runStatus"].as_str()),
        (Some("run_state_conflict"), Some("paused"))
    );
    let events = client.events(&run_id).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "run.paused").count(), 1, "one pause recorded");
    let (status, _) = client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    assert_eq!(status, 200, "a paused run can be cancelled");
    assert_eq!(client.wait_terminal(&run_id, SPEC_DEADLINE).await["status"], "cancelled");
    host.stop().await;
}
