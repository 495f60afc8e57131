//! End to end on the emulated AWS stack (DynamoDB Local + moto's SQS, started by the
//! README's test command). The harness plays API Gateway and the SQS event-source mapping
//! (batch size 1): API requests are API Gateway proxy events handed to the router the `api`
//! function serves; step messages are received from SQS, handed to the dispatcher's batch
//! handler one at a time, and deleted unless the handler reported them failed.
//!
//! The same scenarios run on the embedded host, and their event-type sequences and terminal
//! states must be identical. Without the emulator settings the suite says it is skipped.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::{handle_batch, handle_message, MessageOutcome};
use trellis_aws::reconcile::reconcile;
use trellis_aws::settings::ApiSettings;
use trellis_aws::{AwsApp, Settings};
use trellis_core::limits::HostLimits;
use trellis_http::ApiKey;

const KEY: &str = "aws-e2e-key";
const MAX_RECEIVES: u32 = 3;
const SPEC_DEADLINE: Duration = Duration::from_secs(5);

fn emulators_configured() -> bool {
    // The api function runs with this set (infra/template.yaml): routes see `/v1/...`, not
    // `/<stage>/v1/...`.
    std::env::set_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
    let set =
        std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some() && std::env::var_os("AWS_ENDPOINT_URL_SQS").is_some();
    if !set {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED emulated AWS suite: AWS_ENDPOINT_URL_DYNAMODB/_SQS not set (run scripts/test.sh)"
        );
    }
    set
}

/// One emulated stack: a fresh table and queues.
struct Stack {
    app: AwsApp,
    router: axum::Router,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    dlq_url: String,
    completion_url: String,
    /// Dispatcher items handled, per run and effect kind.
    invocations: HashMap<(String, String), usize>,
}

async fn stack() -> Stack {
    let config = sdk_config().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let table = format!("trellis-e2e-{suffix}");
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    trellis_store_dynamodb::create_table(&ddb, &table).await.expect("table");
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queues =
        trellis_aws::provision::create_queues(&sqs, &format!("e2e-{suffix}"), MAX_RECEIVES, 1).await.expect("queues");
    let (queue_url, dlq_url) = (queues.step.clone(), queues.step_dlq.clone());
    let settings = Settings {
        table_name: table,
        step_queue_url: queue_url.clone(),
        completion_queue_url: queues.completion.clone(),
        max_receive_count: MAX_RECEIVES,
        limits: HostLimits::default(),
        retention_days: 30,
    };
    let app = AwsApp::new(settings, &config);
    let keys = json!([{"label": "e2e", "sha256": hex(&ApiKey::hash_of(KEY)), "tenant": "default", "scopes": ["*"]}]);
    let api = ApiSettings { api_keys: keys.to_string(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    let router = trellis_http::router(app.api_state(&api).await.expect("api state"));
    Stack { app, router, sqs, queue_url, dlq_url, completion_url: queues.completion, invocations: HashMap::new() }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Stack {
    /// Sends an API Gateway REST proxy event through the API's router.
    async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let query: HashMap<&str, &str> = query.split('&').filter_map(|pair| pair.split_once('=')).collect();
        let event = json!({
            "resource": "/{proxy+}",
            "path": path,
            "httpMethod": method,
            "headers": {"Authorization": format!("Bearer {KEY}"), "Content-Type": "application/json", "Host": "api.example"},
            "multiValueHeaders": {},
            "queryStringParameters": if query.is_empty() { Value::Null } else { json!(query) },
            "multiValueQueryStringParameters": if query.is_empty() { Value::Null } else {
                json!(query.iter().map(|(k, v)| (k.to_string(), vec![v.to_string()])).collect::<HashMap<_, _>>())
            },
            "pathParameters": {"proxy": path.trim_start_matches('/')},
            "stageVariables": null,
            "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": method, "path": path, "stage": "prod",
                               "requestId": "r", "identity": {"sourceIp": "127.0.0.1"}, "accountId": "000000000000",
                               "apiId": "api", "protocol": "HTTP/1.1"},
            "body": body.map(|b| b.to_string()),
            "isBase64Encoded": false
        });
        let request = lambda_http::request::from_str(&event.to_string()).expect("API Gateway event parses");
        let (parts, body) = request.into_parts();
        let request = axum::http::Request::from_parts(parts, Body::from(body.to_vec()));
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    async fn create(&self, body: Value) -> String {
        let (status, created) = self.api("POST", "/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        created["runId"].as_str().unwrap().to_owned()
    }

    async fn snapshot(&self, run_id: &str) -> Value {
        self.api("GET", &format!("/v1/runs/{run_id}"), None).await.1
    }

    async fn events(&self, run_id: &str) -> Vec<Value> {
        self.api("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), None).await.1["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn receive(&self, queue_url: &str) -> Option<aws_sdk_sqs::types::Message> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        received.messages().first().cloned()
    }

    fn as_event(message: &aws_sdk_sqs::types::Message) -> SqsMessage {
        let mut record = SqsMessage::default();
        record.message_id = message.message_id().map(str::to_owned);
        record.receipt_handle = message.receipt_handle().map(str::to_owned);
        record.body = message.body().map(str::to_owned);
        if let Some(attributes) = message.attributes() {
            for (name, value) in attributes {
                record.attributes.insert(name.as_str().to_owned(), value.clone());
            }
        }
        record
    }

    /// The batch the event-source mapping would hand over for one message.
    fn single(message: &aws_sdk_sqs::types::Message) -> SqsEvent {
        let mut event = SqsEvent::default();
        event.records = vec![Self::as_event(message)];
        event
    }

    fn count(&mut self, body: &str) {
        let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let run = parsed["runId"].as_str().unwrap_or("?").to_owned();
        let kind = parsed["effect"]["kind"].as_str().unwrap_or("?").to_owned();
        *self.invocations.entry((run, kind)).or_default() += 1;
    }

    /// Plays the event-source mapping until `run_id` is terminal (panics after `within`).
    /// With `twice`, every message is handed to the dispatcher a second time.
    async fn pump_until_terminal(&mut self, run_id: &str, within: Duration, twice: bool) -> Value {
        let started = Instant::now();
        loop {
            let snapshot = self.snapshot(run_id).await;
            if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                return snapshot;
            }
            assert!(started.elapsed() < within, "run {run_id} not terminal within {within:?}: {snapshot}");
            let mut idle = true;
            for (queue, fifo) in [(self.queue_url.clone(), false), (self.completion_url.clone(), true)] {
                let Some(message) = self.receive(&queue).await else { continue };
                idle = false;
                self.count(message.body().unwrap_or(""));
                let event = Self::single(&message);
                let handle = |event| async {
                    let response = if fifo {
                        trellis_aws::dispatch::handle_fifo_batch(&self.app, event).await
                    } else {
                        handle_batch(&self.app, event).await
                    };
                    !response.batch_item_failures.is_empty()
                };
                let mut failed = handle(event.clone()).await;
                if twice {
                    failed |= handle(event).await;
                }
                if !failed {
                    let receipt = message.receipt_handle().unwrap();
                    self.sqs.delete_message().queue_url(&queue).receipt_handle(receipt).send().await.unwrap();
                }
            }
            if idle {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    fn step_invocations(&self, run_id: &str) -> usize {
        self.invocations.get(&(run_id.to_owned(), "step".to_owned())).copied().unwrap_or(0)
    }
}

fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

fn assert_log_well_formed(events: &[Value]) {
    for (expected, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], json!(expected), "gap or duplicate: {:?}", types(events));
    }
}

/// A scenario: a workflow, its inputs, and whether (and when) to cancel.
#[derive(Clone, Copy)]
enum Cancel {
    Never,
    RightAway,
    WhenParked,
}

struct Scenario {
    name: &'static str,
    workflow: &'static str,
    inputs: Value,
    cancel: Cancel,
    nodes_run: usize,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "linear chain",
            workflow: "conformance-multi-node",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 3,
        },
        Scenario {
            name: "fan-out/join",
            workflow: "fan-out-join",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 5,
        },
        Scenario {
            name: "delay",
            workflow: "conformance-delay",
            inputs: json!({"delayMs": 300}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "failing node",
            workflow: "conformance-failure",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "cancel mid-run",
            workflow: "conformance-cancellable",
            inputs: json!({"delayMs": 60000}),
            cancel: Cancel::RightAway,
            nodes_run: 0,
        },
        Scenario {
            name: "cancel while parked",
            workflow: "conformance-cancellable",
            inputs: json!({"delayMs": 60000}),
            cancel: Cancel::WhenParked,
            nodes_run: 1,
        },
        Scenario {
            name: "parent with a completing child",
            workflow: "conformance-subworkflow-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 3,
        },
        Scenario {
            name: "failing child, fail-parent",
            workflow: "strict-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "failing child, absorb",
            workflow: "lenient-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 2,
        },
        Scenario {
            name: "cancel of a parent with a running child",
            workflow: "waiting-parent",
            inputs: json!({}),
            cancel: Cancel::WhenParked,
            nodes_run: 1,
        },
    ]
}

/// The workflows the scenarios use beyond the bundled fixtures.
fn extra_workflows() -> Vec<Value> {
    let parent = |id: &str, child: &str, on_failure: &str| {
        json!({"id": id, "name": id, "version": "1",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": child, "onChildFailure": on_failure}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]})
    };
    vec![
        fan_out_join(),
        parent("strict-parent", "conformance-failure", "fail-parent"),
        parent("lenient-parent", "conformance-failure", "absorb"),
        parent("waiting-parent", "conformance-cancellable", "fail-parent"),
    ]
}

fn fan_out_join() -> Value {
    json!({"id": "fan-out-join", "name": "Fan-out/join", "version": "1",
        "nodes": [{"id": "s", "typeId": "core.noop"}, {"id": "l", "typeId": "core.noop"}, {"id": "r", "typeId": "core.noop"},
                  {"id": "m", "typeId": "core.noop"}, {"id": "j", "typeId": "core.noop"}],
        "edges": [{"id": "1", "sourceNodeId": "s", "targetNodeId": "l"}, {"id": "2", "sourceNodeId": "s", "targetNodeId": "r"},
                  {"id": "3", "sourceNodeId": "s", "targetNodeId": "m"}, {"id": "4", "sourceNodeId": "l", "targetNodeId": "j"},
                  {"id": "5", "sourceNodeId": "r", "targetNodeId": "j"}, {"id": "6", "sourceNodeId": "m", "targetNodeId": "j"}]})
}

/// Runs the scenario on the emulated stack; returns event types and terminal status.
async fn run_on_aws(stack: &mut Stack, scenario: &Scenario, twice: bool) -> (Vec<String>, String) {
    let run_id = stack.create(json!({"workflowId": scenario.workflow, "inputs": scenario.inputs})).await;
    match scenario.cancel {
        Cancel::Never => {}
        Cancel::RightAway => {
            let (status, body) = stack.api("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
            assert_eq!((status, body["status"].as_str()), (200, Some("cancelling")), "a step is in flight");
        }
        Cancel::WhenParked => {
            let started = Instant::now();
            while !types(&stack.events(&run_id).await).contains(&"node.started".to_owned()) {
                assert!(started.elapsed() < SPEC_DEADLINE);
                let message = stack.receive(&stack.queue_url.clone()).await;
                if let Some(message) = message {
                    stack.count(message.body().unwrap_or(""));
                    let outcome = handle_message(&stack.app, &Stack::as_event(&message)).await;
                    assert!(matches!(outcome, MessageOutcome::Done(_)), "{outcome:?}");
                    let handle = message.receipt_handle().unwrap();
                    stack.sqs.delete_message().queue_url(&stack.queue_url).receipt_handle(handle).send().await.unwrap();
                }
            }
            let (status, body) = stack.api("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("cancelled")),
                "a parked run is cancelled in the request"
            );
        }
    }
    let snapshot = stack.pump_until_terminal(&run_id, SPEC_DEADLINE, twice).await;
    let events = stack.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(
        stack.step_invocations(&run_id),
        scenario.nodes_run.max(usize::from(matches!(scenario.cancel, Cancel::RightAway))),
        "{}: one dispatcher invocation per node",
        scenario.name
    );
    (types(&events), snapshot["status"].as_str().unwrap().to_owned())
}

/// Runs the scenario on a fresh embedded host. For a cancel while the first step is in
/// flight, the host's worker is held until the cancel is accepted.
async fn run_embedded(scenario: &Scenario) -> (Vec<String>, String) {
    let hold = matches!(scenario.cancel, Cancel::RightAway);
    let (mut host, client) = embedded_host(hold).await;
    let result = drive_embedded(&mut host, &client, scenario).await;
    host.stop().await;
    result
}

async fn drive_embedded(
    host: &mut trellis::host::EmbeddedHost,
    client: &EmbeddedClient,
    scenario: &Scenario,
) -> (Vec<String>, String) {
    let run_id = client.create(json!({"workflowId": scenario.workflow, "inputs": scenario.inputs})).await;
    match scenario.cancel {
        Cancel::Never => {}
        Cancel::RightAway => {
            let accepted = client.post(&format!("/v1/runs/{run_id}/cancel")).await;
            assert_eq!(accepted["status"], "cancelling", "a step is in flight");
            host.start_worker();
        }
        Cancel::WhenParked => {
            let started = Instant::now();
            while !types(&client.events(&run_id).await).contains(&"node.started".to_owned()) {
                assert!(started.elapsed() < SPEC_DEADLINE);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            client.post(&format!("/v1/runs/{run_id}/cancel")).await;
        }
    }
    let started = Instant::now();
    loop {
        let snapshot = client.get(&format!("/v1/runs/{run_id}")).await;
        if let Some(status @ ("completed" | "failed" | "cancelled")) = snapshot["status"].as_str() {
            return (types(&client.events(&run_id).await), status.to_owned());
        }
        assert!(started.elapsed() < SPEC_DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct EmbeddedClient {
    base: String,
    http: reqwest::Client,
}

impl EmbeddedClient {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("request").json().await.unwrap_or(Value::Null)
    }
    async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, None).await
    }
    async fn post(&self, path: &str) -> Value {
        self.send(reqwest::Method::POST, path, Some(json!({}))).await
    }
    async fn create(&self, body: Value) -> String {
        let created = self.send(reqwest::Method::POST, "/v1/runs", Some(body)).await;
        created["runId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
    }
    async fn events(&self, run_id: &str) -> Vec<Value> {
        self.get(&format!("/v1/runs/{run_id}/events/poll?timeout=0")).await["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

async fn embedded_host(hold_worker: bool) -> (trellis::host::EmbeddedHost, EmbeddedClient) {
    let args = trellis::args::ServeArgs {
        bind: "127.0.0.1:0".parse().unwrap(),
        data_dir: "unused".into(),
        memory: true,
        workflows: Vec::new(),
        fixtures_dir: None,
        keys_file: None,
        max_node_executions: 1000,
        max_run_duration_ms: 86_400_000,
    };
    let options = trellis::host::HostOptions { api_key: Some(KEY.to_owned()), hold_worker, ..Default::default() };
    let host = trellis::host::EmbeddedHost::start(&args, options).await.expect("embedded host");
    let client = EmbeddedClient { base: format!("http://{}", host.addr), http: reqwest::Client::new() };
    for definition in extra_workflows() {
        client.send(reqwest::Method::POST, "/v1/workflows", Some(definition)).await;
    }
    (host, client)
}

#[tokio::test]
async fn scenarios_match_the_embedded_host_and_each_node_is_one_invocation() {
    if !emulators_configured() {
        return;
    }
    let mut aws = stack().await;
    for definition in extra_workflows() {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    for scenario in scenarios() {
        let on_aws = run_on_aws(&mut aws, &scenario, false).await;
        let on_embedded = run_embedded(&scenario).await;
        assert_eq!(on_aws, on_embedded, "{}: AWS and embedded differ", scenario.name);
    }
}

#[tokio::test]
async fn every_message_delivered_twice_gives_the_same_log() {
    if !emulators_configured() {
        return;
    }
    let mut aws = stack().await;
    for definition in extra_workflows() {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    for scenario in scenarios().into_iter().filter(|s| matches!(s.cancel, Cancel::Never)) {
        let once = run_on_aws(&mut aws, &scenario, false).await;
        let twice = run_on_aws(&mut aws, &scenario, true).await;
        assert_eq!(once, twice, "{}: duplicate delivery changed the log", scenario.name);
    }
}

#[tokio::test]
async fn a_crash_between_commit_and_send_is_repaired_by_the_reconciler() {
    if !emulators_configured() {
        return;
    }
    let mut aws = stack().await;
    // An API instance whose sends fail: its create commits (run, run.started, outbox) and
    // the send is lost, as if the function died right after the commit.
    let config = sdk_config().await;
    let mut broken = aws.app.settings.clone();
    broken.step_queue_url = format!("{}-missing", aws.queue_url);
    let crashed = AwsApp::new(broken, &config);
    let keys = json!([{"label": "e2e", "sha256": hex(&ApiKey::hash_of(KEY)), "tenant": "default", "scopes": ["*"]}]);
    let api = ApiSettings { api_keys: keys.to_string(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    let crashed_router = trellis_http::router(crashed.api_state(&api).await.unwrap());
    let healthy_router = std::mem::replace(&mut aws.router, crashed_router);
    let run_id = aws.create(json!({"workflowId": "conformance-multi-node"})).await;
    aws.router = healthy_router;
    assert!(aws.receive(&aws.queue_url.clone()).await.is_none(), "the send was lost");

    let sent = reconcile(&aws.app, 0).await.expect("reconcile");
    assert!(sent >= 1, "the reconciler found the unsent entry");
    let snapshot = aws.pump_until_terminal(&run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed");
    let events = aws.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(events.len(), 8, "nothing duplicated: {:?}", types(&events));
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0, "nothing left unsent");
}

#[tokio::test]
async fn a_step_on_its_last_delivery_fails_the_run() {
    if !emulators_configured() {
        return;
    }
    let aws = stack().await;
    let run_id = aws.create(json!({"workflowId": "conformance-multi-node"})).await;
    // Receive without deleting until the message is on its last allowed delivery.
    let mut message = None;
    let started = Instant::now();
    while message.as_ref().is_none_or(|m: &aws_sdk_sqs::types::Message| {
        Stack::as_event(m).attributes.get("ApproximateReceiveCount").map(String::as_str) != Some("3")
    }) {
        assert!(started.elapsed() < Duration::from_secs(15), "the message never reached its last delivery");
        if let Some(received) = aws.receive(&aws.queue_url.clone()).await {
            aws.sqs
                .change_message_visibility()
                .queue_url(&aws.queue_url)
                .receipt_handle(received.receipt_handle().unwrap())
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
            message = Some(received);
        }
    }
    let outcome = handle_message(&aws.app, &Stack::as_event(&message.unwrap())).await;
    assert_eq!(outcome, MessageOutcome::Exhausted);
    let snapshot = aws.snapshot(&run_id).await;
    assert_eq!(snapshot["status"], "failed");
    assert_eq!(snapshot["error"]["code"], "step_delivery_exhausted");
    assert_eq!(types(&aws.events(&run_id).await).last().unwrap(), "run.failed");
}

#[tokio::test]
async fn an_unparseable_message_ends_in_the_dead_letter_queue() {
    if !emulators_configured() {
        return;
    }
    let aws = stack().await;
    aws.sqs.send_message().queue_url(&aws.queue_url).message_body("{\"not\": \"a step\"}").send().await.unwrap();
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(15), "the message never reached the DLQ");
        if let Some(message) = aws.receive(&aws.queue_url.clone()).await {
            let event = Stack::single(&message);
            let response = handle_batch(&aws.app, event).await;
            assert_eq!(response.batch_item_failures.len(), 1, "reported failed, not deleted");
            aws.sqs
                .change_message_visibility()
                .queue_url(&aws.queue_url)
                .receipt_handle(message.receipt_handle().unwrap())
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
        }
        if let Some(dead) = aws.receive(&aws.dlq_url.clone()).await {
            assert_eq!(dead.body(), Some("{\"not\": \"a step\"}"));
            return;
        }
    }
}

#[tokio::test]
async fn the_dispatcher_entry_routes_batches_schedules_and_refuses_the_rest() {
    if !emulators_configured() {
        return;
    }
    let aws = stack().await;
    let scheduled = json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    let answer = trellis_aws::dispatch::handle_trigger(&aws.app, scheduled).await.expect("reconciler runs");
    assert_eq!(answer, json!({"reconciled": 0}));
    let empty_batch = trellis_aws::dispatch::handle_trigger(&aws.app, json!({"Records": []})).await.unwrap();
    assert_eq!(empty_batch, json!({"batchItemFailures": []}));
    assert!(trellis_aws::dispatch::handle_trigger(&aws.app, json!({"hello": 1})).await.is_err());
}
