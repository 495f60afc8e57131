//! `vendor.trellis.agent` on the embedded host, end to end, against the testkit's fake model
//! (both wire formats) and its scriptable HTTP server on 127.0.0.1: an agent calls an HTTP
//! tool and a child-workflow tool, each result goes back to the model, and its answer
//! completes the node — events in the documented order; `maxTurns` ends the loop with
//! `agent_max_turns`; `budget.maxToolCalls` breaches with `cap.breached`; registration
//! refuses a bad tool naming its field; the two example workflows run to their documented
//! outcome; the agent's events match the official schemas (with `OPENWOP_REFERENCE_DIR`);
//! the providers' key appears in no event, snapshot or debug bundle; and a workflow
//! tool survives a kill -9 of the real binary while its child waits.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{serve_args, start, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis::host::EmbeddedHost;
use trellis_testkit::fake_model::{Api, FakeModel, ModelReply, ToolCallReply};
use trellis_testkit::http_server::{Reply, TestServer};

const WITHIN: Duration = Duration::from_secs(20);

fn write_file(dir: &Path, name: &str, document: &Value) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(document.to_string().as_bytes()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// The providers' key, held in the host's secrets file: it must appear nowhere a run shows.
const CANARY: &str = "sk-test-CANARY-e2e-agent-9a8b7c6d";

/// A host whose providers `oa` (OpenAI, the default) and `an` (Anthropic) point at `model`
/// (which requires their key, [`CANARY`]).
async fn host_with(model: &FakeModel, dir: &Path) -> (EmbeddedHost, Client) {
    model.require_key(CANARY);
    let mut args = serve_args(None);
    args.secrets_file = Some(write_file(dir, "secrets.json", &json!({"secrets": {"model-key": CANARY}})));
    args.ai.providers_file = Some(write_file(
        dir,
        "providers.json",
        &json!([
            {"id": "oa", "kind": "openai", "baseUrl": model.openai_base_url(), "credentialsRef": "model-key",
             "models": ["gpt-test"], "default": true},
            {"id": "an", "kind": "anthropic", "baseUrl": model.anthropic_base_url(), "credentialsRef": "model-key",
             "models": ["claude-test"]}
        ]),
    ));
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    (host, client)
}

async fn register(client: &Client, definition: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
    assert_eq!(status, 201, "{body}");
}

fn agent(id: &str, config: Value) -> Value {
    json!({"id": id, "name": id, "nodes": [{"id": "agent", "typeId": "vendor.trellis.agent", "config": config}],
           "edges": []})
}

/// The tools: `order_status` (GET on `server`) and `escalate` (the `escalation` workflow).
fn tools(server: &TestServer) -> Value {
    json!([
        {"name": "order_status", "description": "The status of an order.",
         "inputSchema": {"type": "object", "additionalProperties": false,
                         "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]},
         "http": {"method": "GET", "url": server.url("/orders/{{inputs.orderId}}"), "timeoutMs": 5000}},
        {"name": "escalate", "description": "Hands the ticket to a human.",
         "inputSchema": {"type": "object", "additionalProperties": false,
                         "properties": {"ticket": {"type": "integer"}}, "required": ["ticket"]},
         "workflowId": "escalation"}
    ])
}

fn call(name: &str, arguments: Value) -> ModelReply {
    ModelReply::tool_calls([ToolCallReply::new(name, arguments)])
}

async fn run(client: &Client, body: Value) -> (String, Value, Vec<Value>) {
    let run_id = client.create(body).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    let events = client.events(&run_id).await;
    (run_id, snapshot, events)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|event| event["type"] == kind).collect()
}

/// The event types of interest, in order.
fn story(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| event["type"].as_str())
        .filter(|kind| {
            kind.starts_with("agent.") || ["provider.usage", "node.completed", "run.completed"].contains(kind)
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn an_agent_calls_an_http_tool_and_a_workflow_tool_then_answers_with_both_wire_formats() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let server = TestServer::start().await;
    server.route("/orders/42", vec![Reply::json(200, &json!({"order": "42", "state": "shipped"}))]);
    let (host, client) = host_with(&model, dir.path()).await;
    register(
        &client,
        json!({"id": "escalation", "name": "escalation", "nodes": [{"id": "n", "typeId": "core.noop"}], "edges": []}),
    )
    .await;
    for route in ["oa/gpt-test", "an/claude-test"] {
        let id = format!("support-{}", &route[..2]);
        let config = json!({"agentId": "core.support", "route": route, "instructions": "You answer support tickets.",
                            "prompt": "Ticket {{variables.ticket}}: where is order 42?", "tools": tools(&server), "maxTurns": 4});
        register(&client, agent(&id, config)).await;
        model.script(vec![
            call("order_status", json!({"orderId": "42"})).reasoning("I should look the order up."),
            call("escalate", json!({"ticket": 7})),
            ModelReply::text("Order 42 has shipped; a human will follow up."),
        ]);
        model.clear_requests();
        let (run_id, snapshot, events) = run(&client, json!({"workflowId": id, "inputs": {"ticket": 7}})).await;
        assert_eq!(snapshot["status"], "completed", "{route}: {snapshot}");
        assert_eq!(
            story(&events),
            [
                "provider.usage",
                "agent.reasoned",
                "agent.toolCalled",
                "agent.toolReturned",
                "provider.usage",
                "agent.toolCalled",
                "agent.toolReturned",
                "provider.usage",
                "agent.decided",
                "node.completed",
                "run.completed"
            ],
            "{route}"
        );
        let called = of_type(&events, "agent.toolCalled");
        let returned = of_type(&events, "agent.toolReturned");
        for (call, back) in called.iter().zip(&returned) {
            assert_eq!(call["payload"]["callId"], back["payload"]["callId"]);
            assert_eq!(back["causationId"], call["eventId"], "{route}: the return is caused by its call");
        }
        assert_eq!(called[0]["payload"]["transport"], "http");
        assert_eq!(called[1]["payload"]["toolTransport"], "workflow");
        assert_eq!(returned[0]["payload"]["outcome"]["body"], json!({"order": "42", "state": "shipped"}));
        assert_eq!(returned[1]["payload"]["outcome"]["ticket"], 7, "the child's variables");
        assert_eq!(of_type(&events, "agent.decided")[0]["payload"]["agentId"], "core.support");
        let outputs = &snapshot["variables"]["agent"];
        assert_eq!((outputs["turns"].clone(), outputs["toolCalls"].clone()), (json!(3), json!(2)), "{snapshot}");
        assert_eq!(outputs["text"], "Order 42 has shipped; a human will follow up.");
        // What the model saw: the tools, then its calls and their results in its own shape.
        let requests = model.requests();
        assert_eq!(requests.len(), 3, "{route}");
        let last = &requests[2].body;
        match requests[2].api {
            Some(Api::OpenAi) => {
                assert_eq!(requests[0].body["tools"][0]["function"]["name"], "order_status");
                let tool = last["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
                assert!(tool["content"].as_str().unwrap().contains("shipped"), "{last}");
                assert!(tool["tool_call_id"].as_str().unwrap().starts_with("call_fake"));
            }
            _ => {
                assert_eq!(requests[0].body["tools"][0]["input_schema"]["type"], "object");
                let result = last["messages"].as_array().unwrap().iter().find_map(|m| {
                    m["content"].as_array()?.iter().find(|block| block["type"] == "tool_result").cloned()
                });
                assert!(result.unwrap()["tool_use_id"].as_str().unwrap().starts_with("toolu_fake"), "{last}");
            }
        }
        assert!(requests.iter().all(|request| !request.stream()), "tool turns are not streamed");
        let child = of_type(&events, "node.dispatched")[0]["payload"]["childRunId"].as_str().unwrap().to_owned();
        assert_eq!(client.snapshot(&child).await["status"], "completed");
        if let Some(reference) = Reference::load("an_agent_calls_an_http_tool_and_a_workflow_tool_then_answers") {
            for event in &events {
                reference.assert_valid("run-event.schema.json", event);
                let definition = match event["type"].as_str().unwrap_or_default() {
                    "agent.toolCalled" => "agentToolCalled",
                    "agent.toolReturned" => "agentToolReturned",
                    "agent.decided" => "agentDecided",
                    "agent.reasoned" => "agentReasoned",
                    _ => continue,
                };
                reference
                    .assert_valid(&format!("run-event-payloads.schema.json#/$defs/{definition}"), &event["payload"]);
            }
        }
        assert!(!Value::Array(events.clone()).to_string().contains("CANARY"), "the events carry the key");
        assert!(!client.snapshot(&run_id).await.to_string().contains("CANARY"), "the snapshot carries the key");
        let (status, bundle) = client.request("GET", &format!("/v1/runs/{run_id}/debug-bundle"), None).await;
        assert_eq!(status, 200, "{bundle}");
        assert!(!bundle.to_string().contains("CANARY"), "the debug bundle carries the key");
    }
    assert_eq!(server.requests().len(), 2, "one GET per run");
    assert_eq!(server.requests()[0].target, "/orders/42");
    host.stop().await;
}

#[tokio::test]
async fn max_turns_and_the_tool_call_budget_end_the_loop_each_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let server = TestServer::start().await;
    server.route("/orders/1", vec![Reply::json(200, &json!({"state": "packed"}))]);
    let (host, client) = host_with(&model, dir.path()).await;
    let config = json!({"instructions": "Look it up.", "tools": tools(&server), "maxTurns": 2});
    register(&client, agent("bounded", config)).await;

    // maxTurns: the second answer still asks for a tool.
    model.script(vec![call("order_status", json!({"orderId": "1"})), call("order_status", json!({"orderId": "1"}))]);
    let (_, snapshot, events) = run(&client, json!({"workflowId": "bounded"})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    let failed = of_type(&events, "node.failed");
    assert_eq!(failed[0]["payload"]["error"]["code"], "agent_max_turns", "{failed:?}");
    assert_eq!(failed[0]["payload"]["error"]["details"]["maxTurns"], 2);
    assert_eq!(of_type(&events, "agent.toolCalled").len(), 1, "the last turn's call is not made");
    assert_eq!(model.pending(), 0);

    // budget.maxToolCalls: 1 — the second call of one answer breaches.
    let two = ModelReply::tool_calls([
        ToolCallReply::new("order_status", json!({"orderId": "1"})),
        ToolCallReply::new("order_status", json!({"orderId": "1"})),
    ]);
    model.script(vec![two]);
    let body = json!({"workflowId": "bounded", "configurable": {"budget": {"maxToolCalls": 1}}});
    let (_, snapshot, events) = run(&client, body).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(of_type(&events, "cap.breached")[0]["payload"]["kind"], "budget-tool-calls", "{events:?}");
    assert_eq!(of_type(&events, "run.failed")[0]["payload"]["error"]["code"], "budget_exhausted");
    assert_eq!(of_type(&events, "agent.toolCalled").len(), 2);
    assert_eq!(of_type(&events, "agent.toolReturned").len(), 1, "the breaching call never ran");
    host.stop().await;
}

#[tokio::test]
async fn registration_refuses_a_bad_tool_naming_the_field_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let (host, client) = host_with(&model, dir.path()).await;
    let http_tool = |name: &str, http: Value| json!({"name": name, "description": "d", "inputSchema": {"type": "object", "additionalProperties": false}, "http": http});
    for (tools, field) in [
        (
            json!([
                http_tool("a", json!({"url": "http://127.0.0.1:1/"})),
                http_tool("a", json!({"url": "http://127.0.0.1:1/"}))
            ]),
            "config.tools[1].name",
        ),
        (json!([http_tool("has space", json!({"url": "http://127.0.0.1:1/"}))]), "config.tools[0].name"),
        (json!([http_tool("a", json!({"url": "ftp://x/"}))]), "config.tools[0].http.url"),
        (
            json!([http_tool("a", json!({"url": "http://127.0.0.1:1/", "method": "BREW"}))]),
            "config.tools[0].http.method",
        ),
        (
            json!([{"name": "a", "description": "d", "inputSchema": {"type": "object", "additionalProperties": false, "patternProperties": {}}, "workflowId": "w"}]),
            "config.tools[0].inputSchema",
        ),
        (
            json!([{"name": "a", "description": "d", "inputSchema": {"type": "object", "additionalProperties": false}}]),
            "config.tools[0]",
        ),
    ] {
        let (status, body) = client
            .request("POST", "/v1/workflows", Some(agent("bad", json!({"instructions": "x", "tools": tools}))))
            .await;
        assert_eq!((status, body["error"].as_str()), (400, Some("validation_error")), "{body}");
        assert!(
            body["message"].as_str().unwrap_or_default().contains(field) || body.to_string().contains(field),
            "{field}: {body}"
        );
    }
    host.stop().await;
}

#[tokio::test]
async fn the_agent_http_tool_example_runs_to_its_documented_outcome_against_the_fake_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let server = TestServer::start().await;
    let (host, client) = host_with(&model, dir.path()).await;
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows");

    // agent-http-tool: one HTTP tool call, then the answer. Its URL is the example's with
    // the test server's address.
    let mut tool: Value =
        serde_json::from_str(&std::fs::read_to_string(examples.join("agent-http-tool.json")).unwrap()).unwrap();
    let url = tool["nodes"][0]["config"]["tools"][0]["http"]["url"].as_str().unwrap().to_owned();
    let path = &url[url.find("/weather").unwrap()..];
    tool["nodes"][0]["config"]["tools"][0]["http"]["url"] = json!(server.url(path));
    server.route("/weather/Oslo", vec![Reply::json(200, &json!({"city": "Oslo", "tempC": 4}))]);
    register(&client, tool).await;
    model.script(vec![call("get_weather", json!({"city": "Oslo"})), ModelReply::text("It is 4 °C in Oslo.")]);
    let (_, snapshot, events) =
        run(&client, json!({"workflowId": "agent-http-tool", "inputs": {"city": "Oslo"}})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(of_type(&events, "agent.toolReturned")[0]["payload"]["outcome"]["body"]["tempC"], 4);
    assert_eq!(snapshot["variables"]["forecast"]["text"], "It is 4 °C in Oslo.");
    host.stop().await;
}

/// The real binary killed (SIGKILL) while the agent waits for its workflow tool's child (an
/// approval gate), restarted on the same data directory: the child is resolved, the agent's
/// loop resumes from its committed state and the run completes with one call per tool.
#[tokio::test]
async fn a_workflow_tool_survives_a_kill_of_the_host_mid_tool() {
    use trellis_testkit::host::spawn_with_env;
    let binary = Path::new(env!("CARGO_BIN_EXE_trellis"));
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let base_url = model.openai_base_url();
    let env = [
        ("TRELLIS_OPENAI_BASE_URL", base_url.as_str()),
        ("TRELLIS_OPENAI_API_KEY", "sk-test-kill"),
        ("TRELLIS_OPENAI_MODELS", "gpt-test"),
    ];
    model.script(vec![call("escalate", json!({"ticket": 9})), ModelReply::text("A human approved it.")]);
    let mut first = spawn_with_env(binary, dir.path(), KEY, None, &env).await;
    let client = Client::new(&first.base, KEY);
    let gate = json!({"id": "gate", "typeId": "core.approvalGate",
                      "config": {"title": "Escalation", "actions": ["accept", "reject"]}});
    register(&client, json!({"id": "escalation", "name": "escalation", "nodes": [gate], "edges": []})).await;
    let schema = json!({"type": "object", "additionalProperties": false,
                        "properties": {"ticket": {"type": "integer"}}, "required": ["ticket"]});
    let tools = json!([{"name": "escalate", "description": "Ask a human.", "inputSchema": schema,
                        "workflowId": "escalation"}]);
    register(&client, agent("durable", json!({"instructions": "Escalate.", "tools": tools}))).await;
    let run_id = client.create(json!({"workflowId": "durable"})).await;
    client.wait_status(&run_id, "waiting-approval", WITHIN).await;
    let events = client.events(&run_id).await;
    let child = of_type(&events, "node.dispatched")[0]["payload"]["childRunId"].as_str().unwrap().to_owned();
    first.child.kill().await.unwrap();

    let mut second = spawn_with_env(binary, dir.path(), KEY, None, &env).await;
    let client = Client::new(&second.base, KEY);
    assert_eq!(client.snapshot(&run_id).await["status"], "waiting-approval");
    let (status, answer) = client
        .request(
            "POST",
            &format!("/v1/runs/{child}/interrupts/gate"),
            Some(json!({"resumeValue": {"action": "accept"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["agent"]["text"], "A human approved it.");
    let events = client.events(&run_id).await;
    assert_eq!(of_type(&events, "agent.toolCalled").len(), 1, "the call is made once");
    assert_eq!(of_type(&events, "agent.toolReturned").len(), 1);
    assert_eq!(model.request_count(), 2, "one model call per turn, none repeated by the restart");
    second.child.kill().await.unwrap();
}
