//! `vendor.trellis.agent`'s executor: registration checks naming the field, the prepared
//! first turn, a model turn against the fake model (tool definitions out, tool calls and
//! usage back, both wire formats) and an HTTP tool step against the testkit's server (its
//! result, and a refused destination as the tool's error, never the attempt's).

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, Progress, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_testkit::fake_model::{FakeModel, ModelReply, ToolCallReply};
use trellis_testkit::http_server::{Reply, TestServer};

use super::AgentActivity;
use crate::ai::{parse_providers, CallPromptActivity};
use crate::http::{AllowList, HttpClient, HttpRequestActivity, HttpSettings};

#[derive(Default)]
struct Recorder(Mutex<Vec<Progress>>);

#[async_trait]
impl ProgressSink for Recorder {
    async fn report(&self, progress: Progress) -> bool {
        self.0.lock().unwrap().push(progress);
        true
    }
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

fn agent(base_url: Option<(&str, &str)>, loopback: bool) -> AgentActivity {
    let providers = match base_url {
        Some((openai, anthropic)) => parse_providers(
            &json!([
                {"id": "oa", "kind": "openai", "baseUrl": openai, "models": ["gpt-test"], "default": true},
                {"id": "an", "kind": "anthropic", "baseUrl": anthropic, "models": ["claude-test"]}
            ])
            .to_string(),
        )
        .unwrap(),
        None => Default::default(),
    };
    let http = if loopback {
        let allow = AllowList::parse("127.0.0.1/32").unwrap();
        HttpClient::system(HttpSettings { allow, ..HttpSettings::default() })
    } else {
        HttpClient::system(HttpSettings::default())
    };
    let prompt = CallPromptActivity::new(http.clone(), providers, None, false);
    AgentActivity::new(prompt, HttpRequestActivity::new(http))
}

fn tool(http: Value) -> Value {
    json!({"name": "lookup", "description": "Looks up.", "inputSchema": {"type": "object", "additionalProperties": false,
           "properties": {"q": {"type": "string"}}, "required": ["q"]}, "http": http})
}

fn call(request: Value) -> ActivityCall {
    ActivityCall {
        run_id: "r1".into(),
        node_id: "agent".into(),
        type_id: super::TYPE_ID.into(),
        activation: 1,
        attempt: 0,
        idempotency_key: "idem-1".into(),
        request,
        timeout_ms: 10_000,
        tenant: "default".into(),
        credentials_ref: None,
    }
}

fn prepare(agent: &AgentActivity, config: &Map<String, Value>) -> Value {
    let variables = Map::new();
    let context = NodeContext {
        node_id: "agent",
        config,
        inputs: object(json!({"ticket": 7})),
        variables: &variables,
        now: Default::default(),
        configurable: None,
        mocks_allowed: false,
    };
    agent.prepare(&context).expect("prepare")
}

#[test]
fn registration_refusals_name_the_field_path_and_the_rule() {
    let agent = agent(None, false);
    let with = |tools: Value| object(json!({"instructions": "x", "tools": tools}));
    for (config, field) in [
        (object(json!({"instructions": "x", "temperature": 7})), "config.temperature"),
        (with(json!([tool(json!({"url": "ftp://x/"}))])), "config.tools[0].http.url"),
        (with(json!([tool(json!({"url": "http://127.0.0.1:1/", "bogus": 1}))])), "config.tools[0].http.bogus"),
        (
            with(json!([tool(json!({"url": "http://127.0.0.1:1/", "auth": {"scheme": "bearer"}}))])),
            "config.tools[0].http.auth is not supported",
        ),
        (
            with(json!([{"name": "a", "description": "d", "inputSchema": {"type": "object"}, "workflowId": "w"}])),
            "config.tools[0].inputSchema.additionalProperties",
        ),
        (
            with(json!([tool(json!({"url": "http://127.0.0.1:1/"})), tool(json!({"url": "http://127.0.0.1:1/"}))])),
            "config.tools[1].name",
        ),
    ] {
        match agent.check("agent", &config) {
            Err(ConfigIssue::Invalid(message)) => assert!(message.contains(field), "{field}: {message}"),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert!(agent.check("agent", &with(json!([tool(json!({"url": "http://127.0.0.1:1/{{inputs.q}}"}))]))).is_ok());
}

#[tokio::test]
async fn a_model_turn_sends_the_tools_and_reads_back_the_calls_in_both_wire_formats() {
    let model = FakeModel::start().await;
    let agent = agent(Some((&model.openai_base_url(), &model.anthropic_base_url())), false);
    for route in ["oa/gpt-test", "an/claude-test"] {
        let config = object(
            json!({"route": route, "instructions": "Help.", "tools": [tool(json!({"url": "http://127.0.0.1:1/"}))]}),
        );
        let request = prepare(&agent, &config);
        assert_eq!(request["messages"][1]["content"], "{\"ticket\":7}", "no prompt: the inputs as JSON");
        assert_eq!(
            (request["stream"].clone(), request["step"].clone()),
            (json!(false), json!({"kind": "model", "turn": 1}))
        );
        model.script(vec![ModelReply::tool_calls([ToolCallReply::new("lookup", json!({"q": "x"}))]).usage(5, 2)]);
        let recorder = Recorder::default();
        let outputs = agent.execute(&call(request), &recorder).await.expect("a turn");
        assert_eq!(outputs["finishReason"], "tool_calls", "{route}");
        assert_eq!(outputs["toolCalls"][0]["name"], "lookup");
        assert_eq!(outputs["toolCalls"][0]["arguments"], json!({"q": "x"}));
        let sent = model.last_request().unwrap();
        assert!(sent.body["tools"].as_array().is_some_and(|tools| tools.len() == 1), "{route}: {}", sent.body);
        assert!(sent.header("idempotency-key").unwrap().ends_with("-t1"), "each turn its own key");
        let usage = recorder.0.lock().unwrap().iter().filter(|p| matches!(p, Progress::Usage(_))).count();
        assert_eq!(usage, 1, "{route}: the turn's usage is reported");
    }
}

#[tokio::test]
async fn an_http_tool_step_returns_the_result_or_the_tools_error_never_a_failed_attempt() {
    let server = TestServer::start().await;
    server.route("/lookup/x", vec![Reply::json(200, &json!({"hits": 3}))]);
    let http = json!({"url": server.url("/lookup/{{inputs.q}}")});
    let step = |http: &Value| {
        call(
            json!({"step": {"kind": "http", "callId": "call-1", "tool": "lookup", "http": http, "arguments": {"q": "x"}}}),
        )
    };
    let outputs = agent(None, true).execute(&step(&http), &Recorder::default()).await.expect("an outcome");
    assert_eq!(outputs["status"], "ok");
    assert_eq!(outputs["result"], json!({"status": 200, "body": {"hits": 3}}));
    assert_eq!(server.requests()[0].target, "/lookup/x");
    // Without loopback in the allow-list the SSRF guard refuses: the tool's error.
    let outputs = agent(None, false).execute(&step(&http), &Recorder::default()).await.expect("an outcome");
    assert_eq!(
        (outputs["status"].as_str(), outputs["error"]["code"].as_str()),
        (Some("error"), Some("http_url_rejected"))
    );
    assert_eq!(
        outputs["error"],
        json!({"code": "http_url_rejected", "message": "destination refused by the host's egress policy"}),
        "no resolved address reaches the model"
    );
}

#[test]
fn a_bedrock_route_this_host_does_not_serve_is_refused_as_a_capability() {
    let agent = agent(None, false);
    for config in [
        json!({"instructions": "x", "route": "bedrock/anthropic.claude"}),
        json!({"instructions": "x", "model": "arn:aws:bedrock:us-east-1::foundation-model/x"}),
    ] {
        match agent.check("agent", &object(config.clone())) {
            Err(ConfigIssue::Capability(name)) => assert_eq!(name, crate::ai::BEDROCK_CAPABILITY, "{config}"),
            other => panic!("{config}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn each_turns_request_key_is_the_identity_of_the_messages_and_tools_it_sends() {
    let model = FakeModel::start().await;
    let agent = agent(Some((&model.openai_base_url(), &model.anthropic_base_url())), false);
    let config = object(
        json!({"route": "oa/gpt-test", "instructions": "Help.", "tools": [tool(json!({"url": "http://127.0.0.1:1/"}))]}),
    );
    let prepared = prepare(&agent, &config);
    let mut keys = Vec::new();
    for result in ["1 hit", "9 hits"] {
        let mut request = prepared.clone();
        let messages = request["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]}));
        messages.push(json!({"role": "tool", "toolCallId": "c1", "name": "lookup", "content": result}));
        request["step"] = json!({"kind": "model", "turn": 2});
        model.script(vec![ModelReply::text("done")]);
        agent.execute(&call(request.clone()), &Recorder::default()).await.expect("a turn");
        let sent = model.last_request().unwrap();
        let key = sent.header("x-trellis-request-key").unwrap().to_owned();
        let expected = crate::ai::identity::SemanticRequest {
            provider: "oa",
            model: "gpt-test",
            messages: request["messages"].as_array().unwrap(),
            temperature: None,
            max_output_tokens: None,
            response_format: None,
        }
        .key_with_tools(request["tools"].as_array().unwrap());
        assert_eq!(key, expected, "the identity of what turn 2 sends");
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1], "different tool results, different identities");
}

#[tokio::test]
async fn a_final_answer_off_its_schema_gets_callprompts_repair_turn_and_an_unknown_provider_its_error() {
    let model = FakeModel::start().await;
    let agent = agent(Some((&model.openai_base_url(), &model.anthropic_base_url())), false);
    let schema = json!({"type": "object", "additionalProperties": false,
                        "properties": {"label": {"type": "string"}}, "required": ["label"]});
    let config = object(json!({"route": "oa/gpt-test", "instructions": "Help.", "responseSchema": schema}));
    let request = prepare(&agent, &config);
    model.script(vec![ModelReply::text("not json"), ModelReply::text("{\"label\":\"refund\"}")]);
    let outputs = agent.execute(&call(request.clone()), &Recorder::default()).await.expect("repaired");
    assert_eq!(outputs["data"], json!({"label": "refund"}));
    let repair = model.last_request().unwrap();
    assert!(repair.body.get("tools").is_none_or(|tools| tools.as_array().is_some_and(Vec::is_empty)), "no tools");
    model.script(vec![ModelReply::text("no"), ModelReply::text("still no")]);
    let error = agent.execute(&call(request.clone()), &Recorder::default()).await.unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.details.unwrap()["repairTurns"].clone()),
        ("response_schema_invalid", json!(1))
    );
    let mut unknown = request;
    unknown["provider"] = json!("nowhere");
    let error = agent.execute(&call(unknown), &Recorder::default()).await.unwrap_err();
    assert_eq!(error.code, "provider_not_supported");
}
