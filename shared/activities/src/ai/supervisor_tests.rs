//! The model-backed supervisor against the testkit's fake model on 127.0.0.1: the prompt
//! and answer schema it sends, a decision that breaks a rule beyond the schema repaired in
//! the one repair turn, and a second invalid answer failing with `response_schema_invalid`.

use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, NoProgress, Progress, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::orchestrator::model::CONTEXT_INPUT;
use trellis_testkit::fake_model::{FakeModel, ModelReply};

use super::SupervisorModelActivity;
use crate::ai::{parse_providers, CallPromptActivity};
use crate::http::HttpClient;

fn supervisor(model: &FakeModel) -> SupervisorModelActivity {
    let document = json!([{"id": "oa", "kind": "openai", "baseUrl": model.openai_base_url(), "models": ["gpt-test"]}]);
    let providers = parse_providers(&document.to_string()).unwrap();
    SupervisorModelActivity::new(&CallPromptActivity::new(
        HttpClient::system(Default::default()),
        providers,
        None,
        false,
    ))
}

fn config() -> Map<String, Value> {
    json!({"route": "oa/gpt-test", "goal": "Answer {{variables.question}}", "instructions": "Be thorough.",
        "workers": [{"id": "researcher", "description": "finds facts", "inputSchema": {"topic": "string"}}],
        "successCriteria": [{"key": "answered", "description": "the question is answered"}]})
    .as_object()
    .cloned()
    .unwrap()
}

fn call(node: &SupervisorModelActivity, config: &Map<String, Value>) -> ActivityCall {
    let variables = json!({"question": "why is the sky blue?"}).as_object().cloned().unwrap();
    let mut inputs = Map::new();
    inputs.insert(CONTEXT_INPUT.into(), json!({"tick": 1, "history": []}));
    let context = NodeContext {
        node_id: "sup",
        config,
        inputs,
        variables: &variables,
        now: Default::default(),
        configurable: None,
        mocks_allowed: false,
    };
    let request = node.prepare(&context).expect("prepare");
    ActivityCall {
        run_id: "r1".into(),
        node_id: "sup".into(),
        type_id: node.type_id().into(),
        activation: 0,
        attempt: 0,
        idempotency_key: "idem-1".into(),
        request,
        timeout_ms: 10_000,
        tenant: "default".into(),
        credentials_ref: None,
    }
}

fn dispatch(worker: &str) -> Value {
    json!({"decision": {"kind": "next-worker", "nextWorkerIds": [worker],
        "nextWorkerInputs": ["{\"topic\": \"sky\"}"], "confidence": 0.9}})
}

#[test]
fn configs_are_checked_with_the_answer_schema_in_the_tier1_subset() {
    let model_free = SupervisorModelActivity::new(&CallPromptActivity::new(
        HttpClient::system(Default::default()),
        parse_providers("[]").unwrap(),
        None,
        false,
    ));
    assert_eq!(model_free.check("sup", &config()), Ok(()));
    let mut bad = config();
    bad.insert("goal".into(), json!("{{unclosed"));
    assert!(model_free.check("sup", &bad).is_err());
    let mut hot = config();
    hot.insert("temperature".into(), json!(5));
    assert!(model_free.check("sup", &hot).is_err());
    let mut on_bedrock = config();
    on_bedrock.insert("route".into(), json!("bedrock/amazon.nova-micro-v1:0"));
    assert_eq!(model_free.check("sup", &on_bedrock), Err(ConfigIssue::Capability(crate::ai::BEDROCK_CAPABILITY)));
    let mut by_arn = config();
    by_arn.insert("route".into(), json!("oa/arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-micro-v1:0"));
    assert_eq!(model_free.check("sup", &by_arn), Err(ConfigIssue::Capability(crate::ai::BEDROCK_CAPABILITY)));
}

#[tokio::test]
async fn the_model_gets_goal_catalog_and_schema_and_a_decision_breaking_a_rule_is_repaired_once() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::json(&dispatch("nobody")).usage(5, 5), ModelReply::json(&dispatch("researcher"))]);
    let node = supervisor(&model);
    let outputs = node.execute(&call(&node, &config()), &NoProgress).await.unwrap();
    assert_eq!(outputs["data"], dispatch("researcher"));
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one repair turn");
    let first = &requests[0];
    let system = first.messages()[0]["content"].as_str().unwrap();
    assert!(system.contains("exactly one decision") && system.ends_with("Be thorough."));
    let user = first.last_user_text().unwrap();
    assert!(user.contains("why is the sky blue?") && user.contains("finds facts") && user.contains("answered"));
    assert_eq!(
        first.body["response_format"]["json_schema"]["schema"]["properties"]["decision"]["anyOf"][0]["properties"]
            ["nextWorkerIds"]["items"]["enum"],
        json!(["researcher"])
    );
    let repair = requests[1].last_user_text().unwrap();
    assert!(repair.contains("/decision/nextWorkerIds/0"), "{repair}");
}

#[tokio::test]
async fn a_second_invalid_answer_fails_with_response_schema_invalid() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::json(&dispatch("nobody")), ModelReply::text("no JSON here")]);
    let node = supervisor(&model);
    let error = node.execute(&call(&node, &config()), &NoProgress).await.unwrap_err();
    assert_eq!(error.code, "response_schema_invalid");
    assert_eq!(error.details.unwrap()["repairTurns"], 1);
    assert_eq!(model.request_count(), 2);
}

#[tokio::test]
async fn a_streamed_tick_reports_chunks_and_usage_and_still_decides() {
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<Progress>>);
    #[async_trait::async_trait]
    impl ProgressSink for Recorder {
        async fn report(&self, progress: Progress) -> bool {
            self.0.lock().unwrap().push(progress);
            true
        }
    }
    let model = FakeModel::start().await;
    let text = dispatch("researcher").to_string();
    let tokens: Vec<String> = text.as_bytes().chunks(8).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect();
    model.push(ModelReply::tokens(tokens).usage(30, 12));
    let node = supervisor(&model);
    let mut streamed = config();
    streamed.insert("stream".into(), json!(true));
    let recorder = Recorder::default();
    let outputs = node.execute(&call(&node, &streamed), &recorder).await.unwrap();
    assert_eq!(outputs["data"], dispatch("researcher"));
    let reports = recorder.0.lock().unwrap().clone();
    assert!(reports.iter().any(|r| matches!(r, Progress::Chunk { .. })), "streamed chunks");
    let usage: Vec<_> =
        reports.iter().filter_map(|r| if let Progress::Usage(u) = r { Some(u) } else { None }).collect();
    assert_eq!((usage.len(), usage[0].input_tokens, usage[0].output_tokens), (1, 30, 12));
    assert!(model.last_request().unwrap().stream());
}
