//! `vendor.trellis.agent` on the emulated AWS stack and on the embedded host, against one fake
//! model provider and one scriptable HTTP server on 127.0.0.1 (the testkit's), with the same
//! scripted replies for both: an agent calls an HTTP tool and a child-workflow tool, then
//! answers — the same event sequence on both backends, the host-minted `callId`s paired and
//! each return caused by its call; and `maxTurns` failing the node with `agent_max_turns`.
//! Without the emulators the suite is ignored.

mod support;

use serde_json::{json, Value};
use support::{embedded_host_with, require_emulators, stack_with, types, AwsDriver, KEY};
use trellis_testkit::fake_model::{FakeModel, ModelReply, ToolCallReply};
use trellis_testkit::http_server::{Reply, TestServer};
use trellis_testkit::script::Runner;
use trellis_testkit::{Driver, HttpDriver};

fn workflows(server: &TestServer) -> Vec<Value> {
    let schema = |property: &str| {
        json!({"type": "object", "additionalProperties": false,
               "properties": {property: {"type": "string"}}, "required": [property]})
    };
    let tools = json!([
        {"name": "order_status", "description": "The status of an order.", "inputSchema": schema("orderId"),
         "http": {"url": server.url("/orders/{{inputs.orderId}}"), "timeoutMs": 5000}},
        {"name": "escalate", "description": "Hands the ticket over.", "inputSchema": schema("ticket"),
         "workflowId": "agent-escalation"}
    ]);
    let agent = |id: &str, max_turns: u32| {
        json!({"id": id, "name": id, "version": "1", "edges": [], "nodes": [{"id": "agent", "typeId": "vendor.trellis.agent",
               "config": {"agentId": "core.support", "instructions": "Answer tickets.", "tools": tools, "maxTurns": max_turns}}]})
    };
    vec![
        json!({"id": "agent-escalation", "name": "escalation", "version": "1", "edges": [],
               "nodes": [{"id": "n", "typeId": "core.noop"}]}),
        agent("agent-tools", 4),
        agent("agent-bounded", 1),
    ]
}

fn replies() -> Vec<ModelReply> {
    vec![
        ModelReply::tool_calls([ToolCallReply::new("order_status", json!({"orderId": "42"}))]),
        ModelReply::tool_calls([ToolCallReply::new("escalate", json!({"ticket": "T-7"}))]),
        ModelReply::text("Order 42 shipped; escalated."),
    ]
}

async fn debug_log(driver: &mut dyn Driver, run_id: &str) -> Vec<Value> {
    let (status, page) =
        driver.call("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug"), None, true).await;
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

fn of_type<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter().filter(|event| event["type"] == kind).collect()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn an_agent_with_tools_runs_the_same_on_aws_as_embedded() {
    require_emulators();
    let fake = FakeModel::start().await;
    let server = TestServer::start().await;
    server.route("/orders/42", vec![Reply::json(200, &json!({"state": "shipped"}))]);
    let providers = json!([{"id": "fake", "kind": "openai", "baseUrl": fake.openai_base_url(),
                            "models": ["fake-model"], "default": true}]);
    let mut aws = stack_with(Default::default(), providers.to_string()).await;
    for definition in workflows(&server) {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    let dir = std::env::temp_dir().join(format!("trellis-emulated-agent-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("providers.json");
    std::fs::write(&file, providers.to_string()).unwrap();
    let ai = trellis::args::AiArgs { providers_file: Some(file), ..Default::default() };
    let (host, client) = embedded_host_with(false, &workflows(&server), ai).await;

    let script = json!({"id": "tools", "workflowId": "agent-tools", "expect": {"status": "completed"}});
    let mut logs = Vec::new();
    fake.script(replies());
    let mut on_aws = AwsDriver(&mut aws);
    let aws_run = Runner::new(&mut on_aws).run(&script).await;
    logs.push(debug_log(&mut on_aws, &aws_run.run_id).await);
    fake.script(replies());
    let mut embedded = HttpDriver::new(&client.base, KEY);
    let embedded_run = Runner::new(&mut embedded).run(&script).await;
    logs.push(debug_log(&mut embedded, &embedded_run.run_id).await);
    assert_eq!((aws_run.status.as_str(), types(&logs[0])), (embedded_run.status.as_str(), types(&logs[1])));
    let log = &logs[0];
    let called = of_type(log, "agent.toolCalled");
    let returned = of_type(log, "agent.toolReturned");
    assert_eq!((called.len(), returned.len()), (2, 2), "{log:?}");
    for (call, back) in called.iter().zip(&returned) {
        assert_eq!(call["payload"]["callId"], back["payload"]["callId"]);
        assert_eq!(back["causationId"], call["eventId"]);
    }
    assert_eq!(returned[0]["payload"]["outcome"]["body"]["state"], "shipped");
    assert_eq!(returned[1]["payload"]["outcome"]["ticket"], "T-7", "the child's variables");
    assert_eq!(of_type(log, "provider.usage").len(), 3, "one usage per turn");
    let (_, snapshot) = on_aws_snapshot(&mut aws, &aws_run.run_id).await;
    assert_eq!(snapshot["variables"]["agent"]["toolCalls"], 2, "{snapshot}");

    // maxTurns 1 and a tool call: agent_max_turns on both.
    let script = json!({"id": "bounded", "workflowId": "agent-bounded",
                        "expect": {"status": "failed", "errorCode": "agent_max_turns"}});
    for driver in [&mut AwsDriver(&mut aws) as &mut dyn Driver, &mut HttpDriver::new(&client.base, KEY)] {
        fake.script(replies());
        let run = Runner::new(driver).run(&script).await;
        assert_eq!(run.status, "failed");
    }
    host.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn on_aws_snapshot(aws: &mut support::Stack, run_id: &str) -> (u16, Value) {
    AwsDriver(aws).call("GET", &format!("/v1/runs/{run_id}"), None, true).await
}
