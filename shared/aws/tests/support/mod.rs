//! The emulated AWS harness the suites share: a fresh stack (table and queues) per test,
//! API Gateway proxy events handed to the router the `api` function serves, the SQS
//! event-source mapping played by receiving messages and handing them to the dispatcher's
//! batch handlers, and an embedded host to compare against.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod children;
pub mod dying;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use trellis_aws::app::sdk_config;
use trellis_aws::local::event::{proxy_request, IncomingRequest};
use trellis_aws::local::pump::{self, QueueKind};
use trellis_aws::settings::ApiSettings;
use trellis_aws::{AwsApp, Settings};
use trellis_core::limits::HostLimits;
use trellis_http::ApiKey;
use trellis_testkit::external::Service;

pub const KEY: &str = "aws-e2e-key";
pub const MAX_RECEIVES: u32 = 3;
pub const SPEC_DEADLINE: Duration = Duration::from_secs(5);

/// Fails the test unless DynamoDB and SQS emulators are configured (the suites are
/// `#[ignore]`d under plain `cargo test`; the README's test command runs them).
pub fn require_emulators() {
    // The api function runs with this set (infra/template.yaml): routes see `/v1/...`, not
    // `/<stage>/v1/...`.
    std::env::set_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
    trellis_testkit::external::require_emulators(&[Service::DynamoDb, Service::Sqs, Service::S3]);
}

/// One emulated stack: a fresh table and queues.
pub struct Stack {
    pub app: AwsApp,
    pub router: axum::Router,
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    pub dlq_url: String,
    pub completion_url: String,
    /// Dispatcher items handled, per run and effect kind.
    pub invocations: HashMap<(String, String), usize>,
}

pub async fn stack() -> Stack {
    stack_with_secrets(Default::default()).await
}

/// [`stack`] with `credentialsRef` resolved as `secrets` says.
pub async fn stack_with_secrets(secrets: trellis_aws::secrets::SecretsSettings) -> Stack {
    stack_with(secrets, String::new()).await
}

/// [`stack`] with `secrets` and the model providers `ai_providers` (`TRELLIS_AI_PROVIDERS`).
#[allow(dead_code)] // not every suite calls models
pub async fn stack_with(secrets: trellis_aws::secrets::SecretsSettings, ai_providers: String) -> Stack {
    stack_tweaked(secrets, ai_providers, |_| {}).await
}

/// [`stack_with`] with its settings changed by `tweak` before the app is built.
#[allow(dead_code)] // not every suite tweaks
pub async fn stack_tweaked(
    secrets: trellis_aws::secrets::SecretsSettings,
    ai_providers: String,
    tweak: impl FnOnce(&mut Settings),
) -> Stack {
    let config = sdk_config().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let table = format!("trellis-e2e-{suffix}");
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    trellis_store_dynamodb::create_table(&ddb, &table).await.expect("table");
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queues =
        trellis_aws::provision::create_queues(&sqs, &format!("e2e-{suffix}"), MAX_RECEIVES, 1).await.expect("queues");
    let (queue_url, dlq_url) = (queues.step.clone(), queues.step_dlq.clone());
    // The runs' blobs: a bucket of the emulator (moto) per stack.
    let bucket = format!("trellis-e2e-{suffix}");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&config).force_path_style(true).build());
    s3.create_bucket().bucket(&bucket).send().await.expect("bucket");
    let settings = Settings {
        table_name: table,
        step_queue_url: queue_url.clone(),
        completion_queue_url: queues.completion.clone(),
        max_receive_count: MAX_RECEIVES,
        dispatcher_timeout_ms: trellis_aws::settings::DEFAULT_DISPATCHER_TIMEOUT_MS,
        // The HTTP scenarios call a local test server; nothing else is private-allowed.
        http: trellis_activities::http::HttpSettings {
            allow: trellis_activities::http::AllowList::parse("127.0.0.1/32").expect("allow list"),
            ..Default::default()
        },
        limits: HostLimits::default(),
        retention_days: 30,
        delta_pages: true,
        secrets,
        test_seams: true,
        // The API's cursor secret below: the dispatcher signs callback tokens the API verifies.
        callback_secret: Some("s".repeat(32)),
        ai_providers,
        public_url: None,
        // Webhook scenarios retry fast; the set is invalidated by this app's own writes.
        webhook_policy: trellis_core::webhook::DeliveryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 100,
            timeout_ms: 2_000,
            ..Default::default()
        },
        webhook_set_ttl_ms: 10_000,
        events: Default::default(),
        blobs: trellis_aws::settings::BlobSettings { bucket: Some(bucket.clone()), path_style: true },
    };
    let mut settings = settings;
    tweak(&mut settings);
    let app = AwsApp::new(settings, &config);
    let keys = json!([{"label": "e2e", "sha256": hex(&ApiKey::hash_of(KEY)), "tenant": "default", "scopes": ["*", "test:seams"]}]);
    let api = ApiSettings { api_keys: keys.to_string(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    let router = trellis_aws::stage::router_with_stage_links(trellis_http::router(
        app.api_state(&api).await.expect("api state"),
    ));
    Stack { app, router, sqs, queue_url, dlq_url, completion_url: queues.completion, invocations: HashMap::new() }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Stack {
    /// Sends an API Gateway REST proxy event through the API's router, with the bearer key.
    pub async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.request(method, path, body, true).await
    }

    /// Sends an API Gateway REST proxy event, with or without the bearer key.
    pub async fn request(&self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value) {
        self.request_accepting(method, path, body, bearer, None).await
    }

    /// [`Stack::request`] with an `Accept` header (the events route answers JSON to one).
    pub async fn request_accepting(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: bool,
        accept: Option<&str>,
    ) -> (u16, Value) {
        let (status, bytes) = self.request_bytes(method, path, body, bearer, accept).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// [`Stack::request_accepting`], answering the body's bytes (e.g. a finished run's
    /// Server-Sent Events).
    pub async fn request_bytes(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: bool,
        accept: Option<&str>,
    ) -> (u16, Vec<u8>) {
        let (status, _, bytes) = self.request_at(None, method, path, body, bearer, accept).await;
        (status, bytes)
    }

    /// [`Stack::request_bytes`] called through `stage` in the path, as the default execute-api
    /// URL is (`requestContext.path` `/{stage}{path}`); `None`: as a custom domain is, with
    /// the stage `prod` in the context only. Answers the headers too.
    pub async fn request_at(
        &self,
        stage: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: bool,
        accept: Option<&str>,
    ) -> (u16, axum::http::HeaderMap, Vec<u8>) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("host", "api.example".parse().unwrap());
        if bearer {
            headers.insert("authorization", format!("Bearer {KEY}").parse().unwrap());
        }
        if let Some(accept) = accept {
            headers.insert("accept", accept.parse().unwrap());
        }
        let body = body.map(|body| body.to_string()).unwrap_or_default();
        self.proxy(stage, method, path, query, &headers, body.as_bytes()).await
    }

    /// A raw request through the API router: `headers` and the exact `body` bytes, no key.
    pub async fn request_raw(&self, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let mut map = axum::http::HeaderMap::new();
        map.insert("host", "api.example".parse().unwrap());
        for (name, value) in headers {
            map.append(axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        let (status, _, bytes) = self.proxy(None, method, path, query, &map, body).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Plays API Gateway: the proxy event of the request, through the router.
    async fn proxy(
        &self,
        stage: Option<&str>,
        method: &str,
        path: &str,
        query: &str,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> (u16, axum::http::HeaderMap, Vec<u8>) {
        let incoming = IncomingRequest {
            method,
            path,
            query,
            headers,
            body,
            stage: stage.unwrap_or("prod"),
            stage_in_path: stage.is_some(),
            source_ip: "127.0.0.1",
        };
        let request = proxy_request(&incoming).expect("API Gateway event parses");
        let (parts, body) = request.into_parts();
        let request = axum::http::Request::from_parts(parts, Body::from(body.to_vec()));
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, bytes.to_vec())
    }

    pub async fn create(&self, body: Value) -> String {
        let (status, created) = self.api("POST", "/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        created["runId"].as_str().unwrap().to_owned()
    }

    pub async fn snapshot(&self, run_id: &str) -> Value {
        self.api("GET", &format!("/v1/runs/{run_id}"), None).await.1
    }

    pub async fn events(&self, run_id: &str) -> Vec<Value> {
        self.api("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), None).await.1["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The whole log as the `debug` stream mode serves it (JSON list), `node.retried` included.
    pub async fn debug_events(&self, run_id: &str) -> Vec<Value> {
        let path = format!("/v1/runs/{run_id}/events?streamMode=debug");
        let (status, page) = self.request_accepting("GET", &path, None, true, Some("application/json")).await;
        assert_eq!(status, 200, "{page}");
        page["events"].as_array().cloned().unwrap_or_default()
    }

    pub async fn receive(&self, queue_url: &str) -> Option<aws_sdk_sqs::types::Message> {
        pump::receive(&self.sqs, queue_url, 1, 0).await.expect("receive").into_iter().next()
    }

    pub fn as_event(message: &aws_sdk_sqs::types::Message) -> SqsMessage {
        pump::sqs_message(message)
    }

    /// The batch the event-source mapping would hand over for one message.
    pub fn single(message: &aws_sdk_sqs::types::Message) -> SqsEvent {
        pump::sqs_event(std::slice::from_ref(message))
    }

    pub fn count(&mut self, body: &str) {
        let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let run = parsed["runId"].as_str().unwrap_or("?").to_owned();
        let kind = parsed["effect"]["kind"].as_str().unwrap_or("?").to_owned();
        *self.invocations.entry((run, kind)).or_default() += 1;
    }

    /// Plays the event-source mapping until `run_id` is terminal (panics after `within`).
    /// With `twice`, every message is handed to the dispatcher a second time.
    pub async fn pump_until_terminal(&mut self, run_id: &str, within: Duration, twice: bool) -> Value {
        let started = Instant::now();
        loop {
            let snapshot = self.snapshot(run_id).await;
            if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                return snapshot;
            }
            assert!(started.elapsed() < within, "run {run_id} not terminal within {within:?}: {snapshot}");
            if self.pump_once(twice).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Receives at most one message from each queue and hands it to its handler, deleting
    /// it unless the handler reported it failed (the event-source mapping of
    /// `trellis_aws::local::pump`, one message at a time so invocations can be counted).
    /// Returns whether both queues were idle.
    pub async fn pump_once(&mut self, twice: bool) -> bool {
        let mut idle = true;
        for (queue, kind) in
            [(self.queue_url.clone(), QueueKind::Steps), (self.completion_url.clone(), QueueKind::Completions)]
        {
            let Some(message) = self.receive(&queue).await else { continue };
            idle = false;
            self.count(message.body().unwrap_or(""));
            let event = Self::single(&message);
            let mut failed = pump::failed_ids(&pump::deliver(&self.app, kind, event.clone()).await);
            if twice {
                failed.extend(pump::failed_ids(&pump::deliver(&self.app, kind, event).await));
            }
            pump::settle(&self.sqs, &queue, std::slice::from_ref(&message), &failed).await.expect("delete");
        }
        idle
    }

    pub fn step_invocations(&self, run_id: &str) -> usize {
        self.invocations.get(&(run_id.to_owned(), "step".to_owned())).copied().unwrap_or(0)
    }
}

pub fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

pub fn assert_log_well_formed(events: &[Value]) {
    for (expected, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], json!(expected), "gap or duplicate: {:?}", types(events));
    }
}

pub struct EmbeddedClient {
    pub base: String,
    http: reqwest::Client,
}

impl EmbeddedClient {
    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("request").json().await.unwrap_or(Value::Null)
    }
    pub async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, None).await
    }
    pub async fn post(&self, path: &str) -> Value {
        self.send(reqwest::Method::POST, path, Some(json!({}))).await
    }
    pub async fn create(&self, body: Value) -> String {
        let created = self.send(reqwest::Method::POST, "/v1/runs", Some(body)).await;
        created["runId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
    }
    pub async fn events(&self, run_id: &str) -> Vec<Value> {
        self.get(&format!("/v1/runs/{run_id}/events/poll?timeout=0")).await["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
    /// The whole log as the `debug` stream mode serves it (JSON list), `node.retried` included.
    pub async fn debug_events(&self, run_id: &str) -> Vec<Value> {
        let url = format!("{}/v1/runs/{run_id}/events?streamMode=debug", self.base);
        let request = self.http.get(url).bearer_auth(KEY).header(reqwest::header::ACCEPT, "application/json");
        let page: Value = request.send().await.expect("request").json().await.expect("a JSON page");
        page["events"].as_array().cloned().unwrap_or_default()
    }
}

/// A fresh in-memory embedded host with `workflows` registered.
pub async fn embedded_host(hold_worker: bool, workflows: &[Value]) -> (trellis::host::EmbeddedHost, EmbeddedClient) {
    embedded_host_with(hold_worker, workflows, Default::default()).await
}

/// [`embedded_host`] with the model providers of `ai`.
pub async fn embedded_host_with(
    hold_worker: bool,
    workflows: &[Value],
    ai: trellis::args::AiArgs,
) -> (trellis::host::EmbeddedHost, EmbeddedClient) {
    let args = trellis::args::ServeArgs {
        bind: "127.0.0.1:0".parse().unwrap(),
        data_dir: "unused".into(),
        memory: true,
        workflows: Vec::new(),
        fixtures_dir: None,
        keys_file: None,
        max_node_executions: 1000,
        max_run_duration_ms: 86_400_000,
        test_seams: true,
        max_concurrent_activities: 256,
        http_allow_private_nets: "127.0.0.1/32".to_owned(),
        http_max_response_bytes: 1_048_576,
        secrets_file: None,
        secrets_from_env: false,
        public_url: None,
        retention: None,
        sweep_interval_ms: 60_000,
        ai,
        integration: Default::default(),
    };
    let options = trellis::host::HostOptions { api_key: Some(KEY.to_owned()), hold_worker, ..Default::default() };
    let host = trellis::host::EmbeddedHost::start(&args, options).await.expect("embedded host");
    let client = EmbeddedClient { base: format!("http://{}", host.addr), http: reqwest::Client::new() };
    for definition in workflows {
        client.send(reqwest::Method::POST, "/v1/workflows", Some(definition.clone())).await;
    }
    (host, client)
}

/// The stack as a testkit driver: requests go through the API router, and every tick plays
/// the event-source mapping once.
pub struct AwsDriver<'a>(pub &'a mut Stack);

#[async_trait]
impl trellis_testkit::webhooks::SignedDriver for AwsDriver<'_> {
    async fn post_raw(&mut self, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
        self.0.request_raw("POST", path, headers, body).await
    }
}

#[async_trait]
impl trellis_testkit::Driver for AwsDriver<'_> {
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value) {
        self.0.request(method, path, body, bearer).await
    }

    async fn tick(&mut self) {
        if self.0.pump_once(false).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
