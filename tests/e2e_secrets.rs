//! Secrets on the embedded host, end to end: the `openwop-smoke-byok-roundtrip` fixture and a
//! `core.http.request` node with bearer auth run against a secrets file, and every event
//! (debug stream), the snapshot, the debug bundle and every log line captured at trace level
//! are searched for the cleartext and the canary marker: neither is there. Also: a host
//! without secrets advertises none and fails such nodes with `credential_unavailable`; a
//! missing secret fails the node with `credential_not_found` before any call; a secrets file
//! others can read stops the host from starting; a tenant's run cannot resolve a secret the
//! file keeps for another tenant (nothing is sent); `conformance.secret.echo` (hash and
//! length of any reachable secret) exists only on a host with the test seams on.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use common::{logs, serve_args, start, start_with, write_keys_file, Client, KEY};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use trellis::host::{EmbeddedHost, HostOptions};
use trellis_testkit::http_server::{Reply, TestServer};

/// Marks the cleartext so a partial leak is found too.
const CANARY: &str = "CANARY-openwop-CONFORMANCE-NEVER-SECRET";
const FIXTURE: &str = "openwop-smoke-byok-roundtrip";
const ECHO: &str = "conformance.secret.echo";
const WITHIN: Duration = Duration::from_secs(10);

fn cleartext() -> String {
    format!("{CANARY}-7c1d2e3f4a5b")
}

fn secrets_file(dir: &Path, mode: u32) -> std::path::PathBuf {
    let path = dir.join("secrets.json");
    let document = json!({"secrets": {"openwop-conformance-canary-secret": cleartext(), "api-token": cleartext()}});
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(document.to_string().as_bytes()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    path
}

fn http_workflow(id: &str, url: &str, credentials_ref: &str) -> Value {
    json!({
        "id": id, "name": id,
        "nodes": [{"id": "call", "typeId": "core.http.request", "credentialsRef": credentials_ref,
                   "config": {"url": url, "method": "POST", "auth": {"scheme": "bearer"}, "body": {"hello": "world"}}}],
        "edges": []
    })
}

fn assert_clean(label: &str, text: &str) {
    assert!(!text.contains(&cleartext()), "{label} carries the cleartext");
    assert!(!text.contains(CANARY), "{label} carries the canary");
}

/// Every place a run's data shows up: debug events, the snapshot, the debug bundle.
async fn assert_run_clean(client: &Client, run_id: &str) {
    let events = client.debug_events(run_id).await;
    assert!(!events.is_empty());
    assert_clean("the events", &Value::Array(events).to_string());
    assert_clean("the snapshot", &client.snapshot(run_id).await.to_string());
    let (status, bundle) = client.request("GET", &format!("/v1/runs/{run_id}/debug-bundle"), None).await;
    assert_eq!(status, 200, "{bundle}");
    assert_clean("the debug bundle", &bundle.to_string());
}

#[tokio::test]
async fn resolved_secrets_never_reach_events_snapshots_bundles_or_logs() {
    let logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.secrets_file = Some(secrets_file(dir.path(), 0o600));
    // A conformance host: the echo kind is registered only with the test seams.
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    assert_eq!(discovery["secrets"], json!({"supported": true, "scopes": ["tenant"], "resolution": "host-managed"}));
    assert!(discovery["nodeTypes"].as_array().unwrap().contains(&json!(ECHO)));

    // The BYOK fixture: only the hash and the length come out.
    let run_id = client.create(json!({"workflowId": FIXTURE, "inputs": {}})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let expected = json!({"secretSha256": hex::encode(Sha256::digest(cleartext())), "secretLength": cleartext().len()});
    assert_eq!(snapshot["variables"]["resolve-secret"], expected, "{snapshot}");
    assert_run_clean(&client, &run_id).await;

    // An HTTP call with bearer auth: the secret is on the wire and nowhere else.
    let server = TestServer::start().await;
    server.route("/hook", vec![Reply::json(200, &json!({"ok": true})).header("x-request-id", "r-1")]);
    let (status, body) = client
        .request("POST", "/v1/workflows", Some(http_workflow("bearer-call", &server.url("/hook"), "api-token")))
        .await;
    assert_eq!(status, 201, "{body}");
    let run_id = client.create(json!({"workflowId": "bearer-call", "inputs": {}})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let seen = server.requests_to("/hook");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {}", cleartext()).as_str()));
    assert_run_clean(&client, &run_id).await;

    // A reference the file does not hold: the node fails before any call.
    let (status, body) = client
        .request("POST", "/v1/workflows", Some(http_workflow("missing-secret", &server.url("/never"), "absent")))
        .await;
    assert_eq!(status, 201, "{body}");
    let run_id = client.create(json!({"workflowId": "missing-secret", "inputs": {}})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "credential_not_found", "{snapshot}");
    assert!(server.requests_to("/never").is_empty(), "no call went out");
    assert_run_clean(&client, &run_id).await;

    host.stop().await;
    let captured = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(captured.contains("secrets file loaded"), "the capture works");
    assert!(captured.contains("core.http.request answered"), "debug lines of the call are captured");
    assert_clean("the logs", &captured);
}

#[tokio::test]
async fn a_host_without_secrets_advertises_none_and_fails_with_credential_unavailable() {
    let _logs = logs();
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    assert!(discovery.get("secrets").is_none(), "{}", discovery["secrets"]);
    let run_id = client.create(json!({"workflowId": FIXTURE, "inputs": {}})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "credential_unavailable", "{snapshot}");

    let server = TestServer::start().await;
    let (status, body) = client
        .request("POST", "/v1/workflows", Some(http_workflow("no-secrets", &server.url("/never"), "api-token")))
        .await;
    assert_eq!(status, 201, "{body}");
    let run_id = client.create(json!({"workflowId": "no-secrets", "inputs": {}})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["error"]["code"], "credential_unavailable", "{snapshot}");
    assert!(server.requests().is_empty(), "no call went out");
    host.stop().await;
}

#[tokio::test]
async fn without_the_test_seams_there_is_no_secret_echo_kind() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.secrets_file = Some(secrets_file(dir.path(), 0o600));
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    assert!(!discovery["nodeTypes"].as_array().unwrap().contains(&json!(ECHO)), "{}", discovery["nodeTypes"]);
    assert_eq!(discovery["secrets"]["supported"], true, "core.http.request still resolves secrets");
    let advertised = discovery["fixtures"].as_array().cloned().unwrap_or_default();
    assert!(!advertised.contains(&json!(FIXTURE)), "{advertised:?}");
    // The bundled fixture is stored but cannot run here, and a new definition cannot use it.
    let (status, body) = client.request("POST", "/v1/runs", Some(json!({"workflowId": FIXTURE, "inputs": {}}))).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    let echo = json!({"id": "echo-here", "name": "echo-here", "edges": [],
                      "nodes": [{"id": "n", "typeId": ECHO, "config": {"secretId": "api-token"}}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(echo)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    host.stop().await;
}

/// A secrets file with one secret for each of two tenants.
fn tenant_secrets_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("tenant-secrets.json");
    let document = json!({"secrets": {
        "acme-token": {"value": format!("{}-acme", cleartext()), "tenants": ["acme"]},
        "default-token": {"value": format!("{}-default", cleartext()), "tenants": ["default"]},
    }});
    std::fs::write(&path, document.to_string()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

#[tokio::test]
async fn a_tenant_cannot_send_another_tenants_secret() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.secrets_file = Some(tenant_secrets_file(dir.path()));
    let all: &[&str] = &["*"];
    args.keys_file = Some(write_keys_file(dir.path(), &[("key-default", "default", all), ("key-acme", "acme", all)]));
    let host = start_with(args, HostOptions::default()).await;
    let base = format!("http://{}", host.addr);
    let server = TestServer::start().await;
    server.route("/own", vec![Reply::json(200, &json!({"ok": true}))]);

    for (key, tenant, own, other) in
        [("key-default", "default", "default-token", "acme-token"), ("key-acme", "acme", "acme-token", "default-token")]
    {
        let client = Client::new(&base, key);
        // Its own secret is sent.
        let id = format!("own-{tenant}");
        let (status, body) =
            client.request("POST", "/v1/workflows", Some(http_workflow(&id, &server.url("/own"), own))).await;
        assert_eq!(status, 201, "{body}");
        let snapshot = client.wait_terminal(&client.create(json!({"workflowId": id})).await, WITHIN).await;
        assert_eq!(snapshot["status"], "completed", "{tenant}: {snapshot}");
        let seen = server.requests_to("/own");
        let expected = format!("Bearer {}-{tenant}", cleartext());
        assert_eq!(seen.last().unwrap().header("authorization"), Some(expected.as_str()), "{tenant}");

        // The other tenant's is not found, and nothing goes out.
        let id = format!("steal-{tenant}");
        let path = format!("/steal-{tenant}");
        let (status, body) =
            client.request("POST", "/v1/workflows", Some(http_workflow(&id, &server.url(&path), other))).await;
        assert_eq!(status, 201, "{body}");
        let run_id = client.create(json!({"workflowId": id})).await;
        let snapshot = client.wait_terminal(&run_id, WITHIN).await;
        assert_eq!(snapshot["status"], "failed", "{tenant}: {snapshot}");
        assert_eq!(snapshot["error"]["code"], "credential_not_found", "{tenant}: {snapshot}");
        assert!(server.requests_to(&path).is_empty(), "{tenant}: nothing was sent");
        assert_run_clean(&client, &run_id).await;
    }
    host.stop().await;
}

#[tokio::test]
async fn registration_refuses_auth_without_credentials_ref() {
    let _logs = logs();
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let mut workflow = http_workflow("no-ref", "https://api.example.com/", "x");
    workflow["nodes"][0].as_object_mut().unwrap().remove("credentialsRef");
    let (status, body) = client.request("POST", "/v1/workflows", Some(workflow)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "validation_error", "{body}");
    assert_eq!(body["details"]["path"], "/nodes/0/credentialsRef", "{body}");
    host.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_secrets_file_others_can_read_stops_the_host() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.secrets_file = Some(secrets_file(dir.path(), 0o644));
    let options = HostOptions { api_key: Some(KEY.to_owned()), ..HostOptions::default() };
    let Err(error) = EmbeddedHost::start(&args, options).await else { panic!("the host started") };
    let text = error.to_string();
    assert!(text.contains("TRELLIS_SECRETS_FILE") && text.contains("chmod 600"), "{text}");
    assert_clean("the start error", &text);
}

#[test]
fn the_vendored_fixture_is_the_official_one() {
    let Some(dir) = std::env::var_os("OPENWOP_REFERENCE_DIR") else {
        eprintln!("SKIPPED the_vendored_fixture_is_the_official_one: OPENWOP_REFERENCE_DIR is not set");
        return;
    };
    let official = std::fs::read_to_string(Path::new(&dir).join("fixtures").join(format!("{FIXTURE}.json"))).unwrap();
    let vendored =
        trellis_core::bundled::FIXTURES.iter().find(|(name, _)| *name == format!("{FIXTURE}.json")).unwrap().1;
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap();
    assert_eq!(parse(vendored), parse(&official));
}

#[tokio::test]
async fn the_shipped_call_with_token_example_sends_the_token() {
    let logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.workflows = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows")];
    args.secrets_file = Some(secrets_file(dir.path(), 0o600));
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let server = TestServer::start().await;
    server.route("/orders", vec![Reply::json(201, &json!({"id": "o-1"}))]);
    let inputs = json!({"url": server.url("/orders"), "payload": {"sku": "a-1"}});
    let run_id = client.create(json!({"workflowId": "call-with-token", "inputs": inputs})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["call"]["body"], json!({"id": "o-1"}));
    let seen = server.requests_to("/orders");
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {}", cleartext()).as_str()));
    assert_eq!(seen[0].json(), json!({"sku": "a-1"}));
    assert_run_clean(&client, &run_id).await;
    host.stop().await;
    assert_clean("the logs", &String::from_utf8_lossy(&logs.lock().unwrap()));
}
