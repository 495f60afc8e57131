//! Forks end to end on an embedded host (replay §6, RFC 0140; `trellis_testkit::replay` holds
//! the scenarios the emulated AWS stack plays too): every status row of `:fork`, replay and
//! branch forks and their determinism, a fork of a cancelled run failing its unreached side
//! effect closed with `replay.diverged` recorded, the effect counter seam (a replay performs
//! nothing, a branch performs again), an HTTP node a replay answers from the source's log
//! while a branch calls the server again, no webhook delivery for a replay's events,
//! `:redrive` of a failed run, and the v2 `:fork`. Nothing leaves 127.0.0.1.

mod common;

use std::time::Duration;

use common::{serve_args, start, trellis_cli, write_keys_file, Client};
use serde_json::{json, Value};
use trellis_testkit::http_server::{Reply, TestServer};
use trellis_testkit::script::Runner;
use trellis_testkit::webhooks::{self, WebhookReceiver};
use trellis_testkit::HttpDriver;
use trellis_testkit::{payloads, replay, rerun};

/// The key of these tests: every scope, and the test seams.
const SEAM_KEY: &str = "replay-key";

async fn host(seams: bool) -> (trellis::host::EmbeddedHost, HttpDriver, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.test_seams = seams;
    args.keys_file = Some(write_keys_file(dir.path(), &[(SEAM_KEY, "default", &["*", "test:seams"])]));
    let host = start(args).await;
    let driver = HttpDriver::new(format!("http://{}", host.addr), SEAM_KEY);
    (host, driver, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fork_row_holds() {
    let (host, mut driver, _dir) = host(false).await;
    replay::fork_rows(&mut driver).await;
    replay::interrupts_short_circuit(&mut driver).await;
    let discovery = Client::new(format!("http://{}", host.addr), SEAM_KEY).discovery().await;
    assert_eq!(
        discovery["replay"],
        json!({"supported": true, "modes": ["replay", "branch"], "sideEffectSuppression": "recorded-outcome"})
    );
    host.stop().await;
}

async fn effect_count(driver: &mut HttpDriver) -> u64 {
    let (status, body) =
        trellis_testkit::Driver::call(driver, "GET", "/v1/host/sample/replay/effect-count", None, true).await;
    assert_eq!(status, 200, "{body}");
    body["count"].as_u64().expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_performs_no_side_effect_and_fails_closed_where_the_source_never_got() {
    let (host, mut driver, _dir) = host(true).await;
    replay::unreached_effect_fails_closed(&mut driver).await;

    let before = effect_count(&mut driver).await;
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let source = client.create(json!({"workflowId": "conformance-replay-effect"})).await;
    assert_eq!(client.wait_terminal(&source, Duration::from_secs(10)).await["status"], "completed");
    assert_eq!(effect_count(&mut driver).await, before + 1, "the source performs its effect");

    let replayed = replay::fork(&mut driver, &source, json!({"mode": "replay"})).await;
    let replayed = replayed["runId"].as_str().unwrap().to_owned();
    assert_eq!(client.wait_terminal(&replayed, Duration::from_secs(10)).await["status"], "completed");
    assert_eq!(effect_count(&mut driver).await, before + 1, "a replay performs nothing");
    let outputs = |events: &[Value]| {
        events
            .iter()
            .find(|e| e["type"] == "node.completed" && e["nodeId"] == "effect")
            .map(|e| e["payload"]["outputs"].clone())
    };
    let source_events = client.events(&source).await;
    let replay_events = client.events(&replayed).await;
    assert_eq!(outputs(&replay_events), outputs(&source_events), "the recorded outcome, not a new one");
    assert!(!replay_events.iter().any(|e| e["type"] == "replay.diverged"), "{replay_events:?}");

    let branch = replay::fork(&mut driver, &source, json!({"mode": "branch", "fromSeq": 0})).await;
    let branch = branch["runId"].as_str().unwrap().to_owned();
    assert_eq!(client.wait_terminal(&branch, Duration::from_secs(10)).await["status"], "completed");
    assert_eq!(effect_count(&mut driver).await, before + 2, "a branch re-fires effects after its fork point");
    host.stop().await;
}

fn http_workflow() -> Value {
    json!({"id": "replay-http", "name": "replay-http",
        "variables": [{"name": "port", "type": "number", "required": true}],
        "nodes": [
            {"id": "charge", "typeId": "core.http.request",
             "config": {"url": "http://127.0.0.1:{{variables.port}}/charge", "method": "POST", "body": {"amount": 5}, "timeoutMs": 2000}},
            {"id": "fail", "typeId": "core.fail", "config": {"code": "after_charge", "message": "fails after the charge"}}
        ],
        "edges": [{"id": "e", "sourceNodeId": "charge", "targetNodeId": "fail"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_answers_an_http_node_from_the_log_and_delivers_no_webhook() {
    let (host, mut driver, _dir) = host(false).await;
    let server = TestServer::start().await;
    server.route("/charge", vec![Reply::json(200, &json!({"charged": true}))]);
    let receiver = WebhookReceiver::start().await;
    let url = receiver.path("/hooks", vec![Reply::status(204)]);
    let registered = webhooks::register(&mut driver, &url, &["run.started", "run.failed"]).await;
    assert!(registered["webhookId"].is_string());
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let (status, body) = client.request("POST", "/v1/workflows", Some(http_workflow())).await;
    assert_eq!(status, 201, "{body}");

    let source = client.create(json!({"workflowId": "replay-http", "inputs": {"port": server.port()}})).await;
    assert_eq!(client.wait_terminal(&source, Duration::from_secs(10)).await["status"], "failed");
    assert_eq!(server.requests_to("/charge").len(), 1);
    webhooks::wait_for(&mut driver, "the source's two deliveries", Duration::from_secs(10), || {
        receiver.deliveries("/hooks").len() >= 2
    })
    .await;

    let replayed = replay::fork(&mut driver, &source, json!({"mode": "replay"})).await;
    let replayed = replayed["runId"].as_str().unwrap().to_owned();
    assert_eq!(client.wait_terminal(&replayed, Duration::from_secs(10)).await["status"], "failed");
    assert_eq!(server.requests_to("/charge").len(), 1, "a replay does not call the server again");
    let charged = |events: &[Value]| {
        events
            .iter()
            .find(|e| e["type"] == "node.completed" && e["nodeId"] == "charge")
            .map(|e| e["payload"]["outputs"]["body"].clone())
    };
    assert_eq!(charged(&client.events(&replayed).await), charged(&client.events(&source).await));

    // :redrive — a branch at the failed node: the charge is history, the failing node runs again.
    let (status, redriven) = client.request("POST", &format!("/v1/runs/{source}:redrive"), Some(json!({}))).await;
    assert_eq!(status, 201, "{redriven}");
    assert_eq!(redriven["mode"], "branch");
    let redriven_id = redriven["runId"].as_str().unwrap().to_owned();
    client.wait_terminal(&redriven_id, Duration::from_secs(10)).await;
    assert_eq!(server.requests_to("/charge").len(), 1, "a redrive keeps the history before the failed node");
    let redriven_events = client.events(&redriven_id).await;
    let fail_start =
        client.events(&source).await.iter().find(|e| e["type"] == "node.started" && e["nodeId"] == "fail").unwrap()
            ["sequence"]
            .clone();
    assert_eq!(redriven["fromSeq"], fail_start);
    assert!(redriven_events.iter().any(|e| e["type"] == "node.failed" && e["nodeId"] == "fail"));
    let (status, refused) = client.request("POST", &format!("/v1/runs/{replayed}:redrive"), Some(json!({}))).await;
    assert_eq!(status, 201, "a failed replay can be redriven too: {refused}");

    let branch = replay::fork(&mut driver, &source, json!({"mode": "branch", "fromSeq": 0})).await;
    let branch = branch["runId"].as_str().unwrap().to_owned();
    client.wait_terminal(&branch, Duration::from_secs(10)).await;
    assert_eq!(server.requests_to("/charge").len(), 2, "a branch from 0 calls the server again");

    // Deliveries: the source's two, the redrive's and the branch's (branches re-fire); none for the replay.
    webhooks::wait_for(&mut driver, "the branch's deliveries", Duration::from_secs(10), || {
        receiver.deliveries("/hooks").len() >= 2 + 2 * 2 + 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let runs: Vec<String> = receiver
        .deliveries("/hooks")
        .iter()
        .map(|d| d.json()["runId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!runs.contains(&replayed), "a replay's events reached a webhook: {runs:?}");
    assert!(runs.contains(&branch) && runs.contains(&redriven_id), "{runs:?}");
    host.stop().await;
}

/// Sends `request` on the v2 surface (`OpenWOP-Version: 2`, this suite's key); status and body.
async fn v2(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.bearer_auth(SEAM_KEY).header("OpenWOP-Version", "2").send().await.expect("the host answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_run_cannot_be_redriven_and_v2_forks_with_projected_ids() {
    let (host, mut driver, _dir) = host(false).await;
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let source = client.create(json!({"workflowId": "conformance-noop"})).await;
    client.wait_terminal(&source, Duration::from_secs(10)).await;
    let (status, refused) = client.request("POST", &format!("/v1/runs/{source}:redrive"), Some(json!({}))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("run_state_conflict")), "{refused}");

    // The same from the command line.
    let base = format!("http://{}", host.addr);
    let output =
        trellis_cli(&base, SEAM_KEY, &["runs", "fork", &source, "--mode", "branch", "--from-seq", "1", "--watch"])
            .await;
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}{}", String::from_utf8_lossy(&output.stderr));
    assert!(shown.contains(&format!("branch fork of {source} from event 1")), "{shown}");
    let output = trellis_cli(&base, SEAM_KEY, &["runs", "redrive", &source]).await;
    assert!(!output.status.success(), "a completed run is not redriven");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("run_state_conflict"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The same Idempotency-Key, sent twice at once: one fork; both answers name it.
    let http = reqwest::Client::new();
    let keyed = |body: Value| {
        http.post(format!("{base}/v1/runs/{source}:fork"))
            .bearer_auth(SEAM_KEY)
            .header("Idempotency-Key", "fork-once")
            .json(&body)
            .send()
    };
    let (first, second) = tokio::join!(keyed(json!({"mode": "replay"})), keyed(json!({"mode": "replay"})));
    let (first, second) = (first.unwrap(), second.unwrap());
    let statuses = [first.status().as_u16(), second.status().as_u16()];
    let (first, second): (Value, Value) = (first.json().await.unwrap(), second.json().await.unwrap());
    assert!(statuses.iter().all(|s| *s == 201 || *s == 409), "{statuses:?} {first} {second}");
    if statuses == [201, 201] {
        assert_eq!(first["runId"], second["runId"], "a duplicate is answered with the first fork");
    } else {
        let refused = if statuses[0] == 409 { &first } else { &second };
        assert_eq!(refused["error"], "idempotency_in_flight", "{refused}");
    }
    let changed = keyed(json!({"mode": "branch", "fromSeq": 0})).await.unwrap();
    assert_eq!(changed.status().as_u16(), 409, "the same key with another body: idempotency_key_mismatch");
    let projected = format!("default~2F{source}");
    let fork = http.post(format!("{base}/runs/{projected}:fork")).json(&json!({"fromSeq": 0, "mode": "replay"}));
    let (status, body) = v2(fork).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["sourceRunId"], format!("default/{source}"));
    let fork_id = body["runId"].as_str().unwrap().strip_prefix("default/").expect("a v2 id").to_owned();
    assert!(body["eventsUrl"].as_str().unwrap().starts_with("/runs/default~2F"), "{body}");
    Runner::new(&mut driver).await_terminal(&fork_id).await;
    let (_, diff) = v2(http.get(format!("{base}/runs/{projected}:diff?against=default~2F{fork_id}"))).await;
    assert_eq!(diff["a"], format!("default/{source}"), "{diff}");
    let (_, discovery) = v2(http.get(format!("{base}/.well-known/openwop"))).await;
    assert_eq!(discovery["replay"]["status"], "stable", "{}", discovery["replay"]);
    assert!(discovery["replay"]["witness"].is_string());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_delete_and_prune_and_the_sweeper_removes_expired_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(Some(dir.path()));
    args.keys_file = Some(write_keys_file(dir.path(), &[(SEAM_KEY, "default", &["*"])]));
    args.sweep_interval_ms = 100;
    let host = start(args).await;
    let mut driver = HttpDriver::new(format!("http://{}", host.addr), SEAM_KEY);
    let expired = replay::retention_scenario(&mut driver).await;

    // The same from the command line.
    let base = format!("http://{}", host.addr);
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let run = client.create(json!({"workflowId": "prune-chain"})).await;
    client.wait_terminal(&run, Duration::from_secs(10)).await;
    let output =
        trellis_cli(&base, SEAM_KEY, &["runs", "prune", "--workflow", "prune-chain", "--keep", "0", "--dry-run"]).await;
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && shown.contains(&run) && shown.contains("would delete 3 runs"), "{shown}");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let prune = ["runs", "prune", "--workflow", "prune-chain", "--keep", "0", "--older-than", "1s"];
    let output = trellis_cli(&base, SEAM_KEY, &prune).await;
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && shown.contains("deleted 3 runs"), "{shown}");
    let kept = client.create(json!({"workflowId": "retention-kept"})).await;
    client.wait_terminal(&kept, Duration::from_secs(10)).await;
    let output = trellis_cli(&base, SEAM_KEY, &["runs", "delete", &kept]).await;
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && shown.contains("deleted (1 runs"),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    host.stop().await;

    // The sweeper deleted the expired run's rows, not only hid them.
    let store = trellis_store_sqlite::SqliteStore::open(&dir.path().join("trellis.db")).unwrap();
    use trellis_core::ports::RunStore;
    assert_eq!(store.load_run(&expired).await.unwrap(), None, "the sweeper removed the run past its retention");
    assert!(store.events_after(&expired, None, 10).await.unwrap().is_empty(), "and its log");
}

/// An embedded host with the seams, loopback allowed, and the fake model as its provider.
async fn host_with_model(
    model: &trellis_testkit::fake_model::FakeModel,
) -> (trellis::host::EmbeddedHost, HttpDriver, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.test_seams = true;
    args.keys_file = Some(write_keys_file(dir.path(), &[(SEAM_KEY, "default", &["*", "test:seams"])]));
    let providers = json!([{"id": "fake", "kind": "openai", "baseUrl": model.openai_base_url(), "models": ["fake-model"], "default": true}]);
    let file = dir.path().join("providers.json");
    std::fs::write(&file, providers.to_string()).unwrap();
    args.ai.providers_file = Some(file);
    let host = start(args).await;
    let driver = HttpDriver::new(format!("http://{}", host.addr), SEAM_KEY);
    (host, driver, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_takes_unchanged_results_from_the_cache_and_calls_what_changed() {
    let model = trellis_testkit::fake_model::FakeModel::start().await;
    let (host, mut driver, _dir) = host_with_model(&model).await;
    let server = TestServer::start().await;
    rerun::serve(&server);
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let (status, body) = client.request("POST", "/v1/workflows", Some(rerun::workflow(&server))).await;
    assert_eq!(status, 201, "{body}");
    let [source, _, changed] = rerun::scenario(&mut driver, &model, &server).await;

    // The client: `trellis runs rerun` with one input changed keeps the others.
    let base = format!("http://{}", host.addr);
    let before = model.requests().len();
    let output =
        trellis_cli(&base, SEAM_KEY, &["-o", "json", "runs", "rerun", &changed, "--input", "tone=warm", "--watch"])
            .await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(model.requests().len(), before, "the same inputs as its source: every model call from the cache");
    let output = trellis_cli(&base, SEAM_KEY, &["runs", "rerun", &source, "--no-cache"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("without the cache"));
    host.stop().await;
}

/// The seam's key for `body`.
async fn cache_key(driver: &mut HttpDriver, body: Value) -> String {
    let (status, answer) =
        trellis_testkit::Driver::call(driver, "POST", "/v1/host/sample/test/llm-cache-key", Some(body), true).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["recipe"], "openwop-semantic-request-v2");
    answer["cacheKey"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_llm_cache_key_seam_computes_the_v2_recipe() {
    let (host, mut driver, _dir) = host(true).await;
    // Golden digests computed outside the host (Python's json.dumps with sorted keys and no
    // whitespace equals JCS for these ASCII documents; sha256 lowercase hex).
    let system = json!({"provider": "anthropic", "model": "claude-3-5-sonnet-20240620", "temperature": 0.7,
        "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 2+2?"}]});
    assert_eq!(
        cache_key(&mut driver, system).await,
        "b8d3304e343970ac53f3cc7cb486b5f2ac91147262c57994abca3f5688fd9f93"
    );
    let base = json!({"provider": "openai", "model": "gpt-4", "temperature": 0.2, "seed": 42,
        "messages": [{"role": "user", "content": "v2-sensitivity-probe"}],
        "providerOptions": {"vendor.openai.logitBias": {"50256": -100}}});
    assert_eq!(
        cache_key(&mut driver, base.clone()).await,
        "89f4c434a8d6ab985f7a8fb5a1ecedafb99d44a5ccb3534ab3a519a3ced8800e"
    );
    // Transport fields change nothing; each recipe field changes the key.
    let mut noisy = base.clone();
    for (field, value) in [
        ("stream", json!(true)),
        ("user", json!("u")),
        ("metadata", json!({"traceId": "a"})),
        ("x-request-id", json!("r")),
        ("tenantId", json!("t")),
        ("timeoutMs", json!(30000)),
    ] {
        noisy[field] = value;
    }
    assert_eq!(cache_key(&mut driver, noisy).await, cache_key(&mut driver, base.clone()).await);
    for (field, value) in [
        ("seed", json!(43)),
        ("stop", json!(["HALT"])),
        ("maxOutputTokens", json!(100)),
        ("temperature", json!(1.0)),
        ("providerOptions", json!({"vendor.openai.logitBias": {"50256": 100}})),
    ] {
        let mut changed = base.clone();
        changed[field] = value;
        assert_ne!(
            cache_key(&mut driver, changed).await,
            cache_key(&mut driver, base.clone()).await,
            "{field} decides the completion"
        );
    }
    let (status, error) = trellis_testkit::Driver::call(
        &mut driver,
        "POST",
        "/v1/host/sample/test/llm-cache-key",
        Some(json!({"model": "m"})),
        true,
    )
    .await;
    assert_eq!((status, error["details"]["field"].as_str()), (400, Some("provider")), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_child_output_round_trips_and_pruning_removes_its_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(Some(dir.path()));
    args.keys_file = Some(write_keys_file(dir.path(), &[(SEAM_KEY, "default", &["*"])]));
    let host = start(args).await;
    let mut driver = HttpDriver::new(format!("http://{}", host.addr), SEAM_KEY);
    let server = TestServer::start().await;
    let document = payloads::serve(&server);
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    for definition in payloads::workflows(&server) {
        let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
        assert_eq!(status, 201, "{body}");
    }
    let played = payloads::scenario(&mut driver, &server, &document).await;

    let database = dir.path().join("trellis.db");
    let blob_rows = |run_id: &str| -> i64 {
        let connection =
            rusqlite::Connection::open_with_flags(&database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        connection.query_row("SELECT COUNT(*) FROM run_blobs WHERE run_id = ?1", [run_id], |row| row.get(0)).unwrap()
    };
    // The embedded host holds its file exclusively: look at it once the host is stopped.
    host.stop().await;
    assert_eq!((blob_rows(&played.parent), blob_rows(&played.child)), (1, 1), "one blob each, written once");

    let mut args = serve_args(Some(dir.path()));
    args.keys_file = Some(write_keys_file(dir.path(), &[(SEAM_KEY, "default", &["*"])]));
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), SEAM_KEY);
    let (status, report) =
        client.request("POST", "/v1/runs:prune", Some(json!({"workflowId": payloads::PARENT, "keep": 0}))).await;
    assert_eq!(status, 200, "{report}");
    assert!(report["bytes"].as_u64().unwrap() > 2 * 5_000_000, "the blobs count in what a prune frees: {report}");
    let (status, _) =
        client.request("GET", &format!("/v1/runs/{}/blobs/{}", played.parent, played.reference), None).await;
    assert_eq!(status, 404);
    host.stop().await;
    assert_eq!((blob_rows(&played.parent), blob_rows(&played.child)), (0, 0), "pruned with their runs");
}
