//! Shared helpers of the end-to-end suites: an embedded host on a free port, an HTTP client
//! with a key, waiting for a run to end, and the official OpenWOP schemas when
//! `OPENWOP_REFERENCE_DIR` points at them.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod aws_local;
pub mod browser;
pub mod client;
pub mod ui;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis::args::ServeArgs;
use trellis::host::{EmbeddedHost, HostOptions};

pub const KEY: &str = "e2e-key";

/// Writes a keys file of `(secret, tenant, scopes)` entries into `dir`; returns its path.
pub fn write_keys_file(dir: &Path, keys: &[(&str, &str, &[&str])]) -> PathBuf {
    let entries: Vec<Value> = keys
        .iter()
        .map(|(secret, tenant, scopes)| {
            json!({"label": tenant, "sha256": hex::encode(trellis_http::ApiKey::hash_of(secret)), "tenant": tenant, "scopes": scopes})
        })
        .collect();
    let path = dir.join("keys.json");
    std::fs::write(&path, Value::Array(entries).to_string()).unwrap();
    path
}

/// `trellis serve` arguments for a test host on an ephemeral port.
pub fn serve_args(data_dir: Option<&Path>) -> ServeArgs {
    ServeArgs {
        bind: "127.0.0.1:0".parse().unwrap(),
        data_dir: data_dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("unused")),
        memory: data_dir.is_none(),
        workflows: Vec::new(),
        fixtures_dir: None,
        keys_file: None,
        max_node_executions: 1000,
        max_run_duration_ms: 86_400_000,
        test_seams: false,
        max_concurrent_activities: 256,
        // Tests call local servers only; loopback is the one private destination allowed.
        http_allow_private_nets: "127.0.0.1/32".to_owned(),
        http_max_response_bytes: 1_048_576,
        secrets_file: None,
        secrets_from_env: false,
        public_url: None,
        retention: None,
        sweep_interval_ms: 60_000,
        ai: Default::default(),
        integration: Default::default(),
    }
}

/// Runs the `trellis` client against `base` with `key` (no config file is read); its output.
pub async fn trellis_cli(base: &str, key: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_trellis"))
        .args(args)
        .env("TRELLIS_URL", base)
        .env("TRELLIS_API_KEY", key)
        .env_remove("TRELLIS_CONFIG")
        .current_dir(std::env::temp_dir())
        .output()
        .await
        .expect("the trellis binary runs")
}

pub async fn start(args: ServeArgs) -> EmbeddedHost {
    start_with(args, HostOptions { api_key: Some(KEY.to_owned()), ..HostOptions::default() }).await
}

pub async fn start_with(args: ServeArgs, options: HostOptions) -> EmbeddedHost {
    EmbeddedHost::start(&args, options).await.expect("host starts")
}

pub struct Client {
    pub base: String,
    pub key: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: impl Into<String>, key: &str) -> Self {
        Self { base: base.into(), key: key.to_owned(), http: reqwest::Client::new() }
    }

    pub async fn request(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn create(&self, body: Value) -> String {
        let (status, created) = self.request("POST", "/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        created["runId"].as_str().unwrap().to_owned()
    }

    /// `GET /v1/runs/{id}/events?streamMode=debug` as a JSON list (every event, `node.retried`
    /// and host events included).
    pub async fn debug_events(&self, run_id: &str) -> Vec<Value> {
        let listing: Value = self
            .http
            .get(format!("{}/v1/runs/{run_id}/events?streamMode=debug", self.base))
            .bearer_auth(&self.key)
            .header("accept", "application/json")
            .send()
            .await
            .expect("request sent")
            .json()
            .await
            .expect("a JSON list");
        listing["events"].as_array().cloned().unwrap_or_default()
    }

    /// The discovery document (no key).
    pub async fn discovery(&self) -> Value {
        let url = format!("{}/.well-known/openwop", self.base);
        reqwest::get(url).await.expect("discovery").json().await.expect("discovery is JSON")
    }

    pub async fn snapshot(&self, run_id: &str) -> Value {
        self.request("GET", &format!("/v1/runs/{run_id}"), None).await.1
    }

    /// Every event of the run (polls until the terminal event is read or `within` passes).
    pub async fn events(&self, run_id: &str) -> Vec<Value> {
        self.request("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), None).await.1["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits with long-polls until the run is terminal; panics after `within`.
    pub async fn wait_terminal(&self, run_id: &str, within: Duration) -> Value {
        let started = Instant::now();
        loop {
            let snapshot = self.snapshot(run_id).await;
            if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                return snapshot;
            }
            assert!(started.elapsed() < within, "run {run_id} not terminal within {within:?}: {snapshot}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_status(&self, run_id: &str, status: &str, within: Duration) -> Value {
        let started = Instant::now();
        loop {
            let snapshot = self.snapshot(run_id).await;
            if snapshot["status"] == status {
                return snapshot;
            }
            assert!(started.elapsed() < within, "run {run_id} never {status} within {within:?}: {snapshot}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

/// Sequences are 0..n with no gap, no duplicate, exactly one terminal event, last.
pub fn assert_log_well_formed(events: &[Value]) {
    for (expected, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], json!(expected), "gap or duplicate at {expected}: {events:?}");
    }
    let terminal: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e["type"].as_str(), Some("run.completed" | "run.failed" | "run.cancelled")))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(terminal, vec![events.len() - 1], "exactly one terminal event, last: {:?}", types(events));
}

/// The official schemas, when `OPENWOP_REFERENCE_DIR` is set (CI sets it).
pub struct Reference {
    pub dir: PathBuf,
    registry: jsonschema::Registry<'static>,
}

impl Reference {
    /// `None` (and a line saying the checks are skipped) when the variable is unset.
    pub fn load(test: &str) -> Option<Self> {
        let Some(dir) = std::env::var_os("OPENWOP_REFERENCE_DIR").map(PathBuf::from) else {
            // Written past the test harness's output capture, so the skip is visible.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: OPENWOP_REFERENCE_DIR is not set, official-schema checks not run"
            );
            return None;
        };
        let mut schemas = Vec::new();
        for entry in std::fs::read_dir(dir.join("schemas")).expect("reference schemas dir") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                let id = schema["$id"].as_str().expect("schema has $id").to_owned();
                schemas.push((id, schema));
            }
        }
        let registry = jsonschema::Registry::new()
            .extend(schemas)
            .expect("schemas register")
            .prepare()
            .expect("registry prepares");
        Some(Self { dir, registry })
    }

    fn errors(&self, name: &str, instance: &Value) -> Vec<String> {
        let id = format!("https://openwop.dev/spec/v1/{name}");
        let validator = jsonschema::options()
            .with_registry(&self.registry)
            .offline()
            .build(&json!({ "$ref": id }))
            .unwrap_or_else(|error| panic!("schema {name} builds: {error}"));
        validator.iter_errors(instance).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }

    /// Asserts `instance` is valid against the schema file `name` (e.g. `run-event.schema.json`).
    pub fn assert_valid(&self, name: &str, instance: &Value) {
        let errors = self.errors(name, instance);
        assert!(errors.is_empty(), "{name} rejects {instance}: {errors:?}");
    }

    /// Asserts `instance` is rejected (proves the validator is live).
    pub fn assert_invalid(&self, name: &str, instance: &Value) {
        assert!(!self.errors(name, instance).is_empty(), "{name} accepts {instance}");
    }
}

/// Every log line of this test binary, at trace level (the first call installs the
/// subscriber): the suites that check that no secret reaches a log read it.
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Capture(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        buffer
    })
    .clone()
}

/// The writer [`logs`] installs.
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
