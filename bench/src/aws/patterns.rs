//! `trellis-bench-aws --patterns`: what each run of the six agent-workflow patterns
//! (`examples/workflows/patterns/`) costs on the serverless path. Each pattern's own check
//! (`trellis_testkit::patterns`, the one its tests run) is played against the emulated stack
//! through the API's router, with the step and completion queues pumped one message at a time,
//! against the content-routed fake model; per run it created, the figures are DynamoDB request
//! units (from serialized item sizes, as the store meters them), SQS requests, dispatcher
//! invocations and model calls.
//!
//! Only work is counted: the check's own polling (`GET`s, which read the table through the API
//! function) is metered apart and left out. A run's figures span from its `POST /v1/runs` to the
//! next run's creation (or the end of the check), its child runs and approvals included.

use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use trellis_aws::local::pump::{self, QueueKind};
use trellis_aws::settings::ApiSettings;
use trellis_aws::{AwsApp, Settings};
use trellis_store_dynamodb::Usage;
use trellis_testkit::fake_model::FakeModel;
use trellis_testkit::http_server::TestServer;
use trellis_testkit::patterns::{self, Env};
use trellis_testkit::Driver;

const KEY: &str = "bench-patterns-key";

/// What one stretch of work cost.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    write_units: u64,
    read_units: u64,
    sqs_requests: u64,
    invocations: u64,
    model_calls: u64,
}

impl Cost {
    fn minus(self, other: Cost) -> Cost {
        Cost {
            write_units: self.write_units - other.write_units,
            read_units: self.read_units - other.read_units,
            sqs_requests: self.sqs_requests - other.sqs_requests,
            invocations: self.invocations - other.invocations,
            model_calls: self.model_calls - other.model_calls,
        }
    }
}

/// One run a check created.
struct Segment {
    scenario: String,
    workflow_id: String,
    run_id: String,
    start: Cost,
    end: Option<Cost>,
}

/// The stack as a driver that meters what the work (not the polling) costs.
struct MeteredStack<'a> {
    router: axum::Router,
    api: &'a AwsApp,
    app: &'a AwsApp,
    sqs: &'a aws_sdk_sqs::Client,
    queues: [(String, QueueKind); 2],
    model: &'a FakeModel,
    /// SQS receives that returned a message and deletes, one each per message at batch size 1
    /// (sends are the apps' own counts).
    pump_requests: u64,
    invocations: u64,
    /// What the check's `GET`s cost (the API function reading for the observer).
    polling: Usage,
    segments: Vec<Segment>,
    /// The scenario the check plays now.
    scenario: String,
}

impl MeteredStack<'_> {
    fn usage(&self) -> Usage {
        self.app.store.usage() + self.api.store.usage()
    }

    /// Everything so far, polling excluded.
    fn cost(&self) -> Cost {
        let usage = self.usage();
        Cost {
            write_units: usage.write_units - self.polling.write_units,
            read_units: usage.read_units - self.polling.read_units,
            sqs_requests: self.app.effects.requests() + self.api.effects.requests() + self.pump_requests,
            invocations: self.invocations,
            model_calls: self.model.served(),
        }
    }

    fn close_segment(&mut self) {
        let now = self.cost();
        if let Some(last) = self.segments.last_mut().filter(|segment| segment.end.is_none()) {
            last.end = Some(now);
        }
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value) {
        let mut request =
            axum::http::Request::builder().method(method).uri(path).header("content-type", "application/json");
        if bearer {
            request = request.header("authorization", format!("Bearer {KEY}"));
        }
        let body = body.map(|body| body.to_string()).unwrap_or_default();
        let request = request.body(Body::from(body)).expect("request");
        let response = self.router.clone().oneshot(request).await.expect("router answers");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

#[async_trait]
impl Driver for MeteredStack<'_> {
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value) {
        let before = self.usage();
        let workflow_id = body.as_ref().and_then(|body| body["workflowId"].as_str()).map(str::to_owned);
        let creates = method == "POST" && path == "/v1/runs";
        if creates {
            self.close_segment();
        }
        let start = self.cost();
        let (status, answer) = self.send(method, path, body, bearer).await;
        if method == "GET" {
            let after = self.usage();
            self.polling.write_units += after.write_units - before.write_units;
            self.polling.read_units += after.read_units - before.read_units;
        }
        if creates && status == 201 {
            let run_id = answer["runId"].as_str().unwrap_or_default().to_owned();
            let scenario = self.scenario.clone();
            self.segments.push(Segment {
                scenario,
                workflow_id: workflow_id.unwrap_or_default(),
                run_id,
                start,
                end: None,
            });
        }
        (status, answer)
    }

    fn scenario(&mut self, name: &str) {
        self.scenario = name.to_owned();
    }

    async fn tick(&mut self) {
        let mut idle = true;
        for (queue, kind) in self.queues.clone() {
            let received = pump::receive(self.sqs, &queue, 1, 0).await.expect("receive");
            let Some(message) = received.into_iter().next() else { continue };
            // A receive that returned the message; the empty polls of this pump are not counted
            // (their number follows the check's polling, not the work).
            self.pump_requests += 1;
            idle = false;
            self.invocations += 1;
            let event = pump::sqs_event(std::slice::from_ref(&message));
            let failed = pump::failed_ids(&pump::deliver(self.app, kind, event).await);
            pump::settle(self.sqs, &queue, std::slice::from_ref(&message), &failed).await.expect("delete");
            self.pump_requests += 1;
        }
        if idle {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs every pattern's check on a fresh pair of apps over `settings`' table and queues and
/// prints the cost of each run it created.
pub(crate) async fn figures(settings: &Settings, config: &aws_config::SdkConfig, sqs: &aws_sdk_sqs::Client) {
    let model = FakeModel::start().await;
    let http = TestServer::start().await;
    let providers = json!([{"id": "fake", "kind": "openai", "baseUrl": model.openai_base_url(),
                            "models": ["fake-model"], "default": true}]);
    let settings = Settings {
        ai_providers: providers.to_string(),
        http: trellis_activities::http::HttpSettings {
            allow: trellis_activities::http::AllowList::parse("127.0.0.1/32").expect("allow list"),
            ..Default::default()
        },
        ..settings.clone()
    };
    let app = AwsApp::new(settings.clone(), config);
    let api = AwsApp::new_api(settings.clone(), config);
    let hash: String = trellis_http::ApiKey::hash_of(KEY).iter().map(|byte| format!("{byte:02x}")).collect();
    let keys = json!([{"label": "bench", "sha256": hash, "tenant": "default", "scopes": ["*"]}]);
    let api_settings =
        ApiSettings { api_keys: keys.to_string(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    let router = trellis_http::router(api.api_state(&api_settings).await.expect("api state"));
    let queues = [
        (settings.step_queue_url.clone(), QueueKind::Steps),
        (settings.completion_queue_url.clone(), QueueKind::Completions),
    ];
    let mut stack = MeteredStack {
        router,
        api: &api,
        app: &app,
        sqs,
        queues,
        model: &model,
        pump_requests: 0,
        invocations: 0,
        polling: Usage::default(),
        segments: Vec::new(),
        scenario: String::new(),
    };
    println!(
        "trellis-bench-aws --patterns: every run of each pattern's checks, on the emulated stack (polling excluded)"
    );
    println!(
        "| pattern | scenario | workflow | status | model calls | WRU | RRU | SQS requests | invocations (dispatcher, completion) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for pattern in patterns::PATTERNS {
        stack.segments.clear();
        {
            let mut env = Env { driver: &mut stack, model: &model, http: &http };
            env.register_all().await;
            check(pattern, &mut env).await;
        }
        stack.close_segment();
        let segments = std::mem::take(&mut stack.segments);
        for segment in &segments {
            let status = stack.send("GET", &format!("/v1/runs/{}", segment.run_id), None, true).await.1["status"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            let cost = segment.end.unwrap_or(segment.start).minus(segment.start);
            println!(
                "| {pattern} | {} | {} | {status} | {} | {} | {} | {} | {} |",
                segment.scenario,
                segment.workflow_id,
                cost.model_calls,
                cost.write_units,
                cost.read_units,
                cost.sqs_requests,
                cost.invocations
            );
        }
    }
}

async fn check(pattern: &str, env: &mut Env<'_>) {
    match pattern {
        "classify-and-act" => patterns::classify_and_act::check(env).await,
        "fan-out-and-synthesize" => patterns::fan_out_and_synthesize::check(env).await,
        "adversarial-verification" => patterns::adversarial_verification::check(env).await,
        "generate-and-filter" => patterns::generate_and_filter::check(env).await,
        "tournament" => patterns::tournament::check(env).await,
        "loop-until-done" => patterns::loop_until_done::check(env).await,
        other => panic!("unknown pattern {other}"),
    }
}
