//! Shared set-up of the `core.http.request` tests: a loopback [`TestServer`], a scripted
//! resolver (`api.test` → 127.0.0.1) and a recording connector that refuses anything off
//! loopback.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use serde_json::{Map, Value};
use trellis_activities::http::{AllowList, HttpClient, HttpRequestActivity, HttpSettings};
use trellis_core::activity::{idempotency_key, Activity, ActivityCall, ActivityResult, NoProgress};
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;
use trellis_testkit::http_server::TestServer;
use trellis_testkit::net::{RecordingConnector, ScriptedResolver};

/// The name every test server answers to.
pub const HOST: &str = "api.test";

pub fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

pub struct Harness {
    pub server: TestServer,
    pub resolver: Arc<ScriptedResolver>,
    pub connector: Arc<RecordingConnector>,
    pub activity: HttpRequestActivity,
}

impl Harness {
    /// 127.0.0.1/32 allow-listed, the default body cap.
    pub async fn new() -> Self {
        Self::with("127.0.0.1/32", 1 << 20).await
    }

    pub async fn with(allow: &str, max_response_body_bytes: usize) -> Self {
        let server = TestServer::start().await;
        let resolver = Arc::new(ScriptedResolver::new());
        resolver.answer(HOST, &["127.0.0.1"]);
        let connector = Arc::new(RecordingConnector::new());
        let allow = AllowList::parse(allow).expect("allow-list");
        let settings = HttpSettings { allow, max_response_body_bytes, ..HttpSettings::default() };
        let client = HttpClient::new(settings, resolver.clone(), connector.clone());
        Self { server, resolver, connector, activity: HttpRequestActivity::new(client) }
    }

    /// `http://api.test:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{HOST}:{}{path}", self.server.port())
    }

    pub fn prepare(&self, config: &Value, inputs: Value, variables: &Value) -> Result<Value, RunError> {
        let config = object(config.clone());
        assert_eq!(self.activity.check("n", &config), Ok(()), "the test config is valid");
        let variables = object(variables.clone());
        let context = NodeContext {
            node_id: "n",
            config: &config,
            inputs: object(inputs),
            variables: &variables,
            now: 0,
            configurable: None,
            mocks_allowed: false,
        };
        self.activity.prepare(&context)
    }

    /// Executes a prepared request as attempt `attempt` of run `run-1`, node `n`.
    pub async fn execute(&self, request: Value, attempt: u32, timeout_ms: u64) -> ActivityResult {
        let call = ActivityCall {
            run_id: "run-1".into(),
            node_id: "n".into(),
            type_id: "core.http.request".into(),
            activation: 0,
            attempt,
            idempotency_key: idempotency_key("run-1", "n", 0),
            request,
            timeout_ms,
            tenant: "default".into(),
            credentials_ref: None,
        };
        self.activity.execute(&call, &NoProgress).await
    }

    /// Prepares and executes attempt 0 of `config` with empty inputs and variables.
    pub async fn run(&self, config: Value) -> ActivityResult {
        let request = self.prepare(&config, Value::Object(Map::new()), &Value::Object(Map::new())).expect("prepared");
        self.execute(request, 0, 5_000).await
    }

    /// Nothing was ever attempted off loopback.
    pub fn assert_no_violations(&self) {
        assert_eq!(self.connector.violations(), Vec::new(), "connects off loopback were attempted");
    }
}
