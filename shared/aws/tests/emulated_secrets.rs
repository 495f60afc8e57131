//! `credentialsRef` on the emulated AWS stack: Secrets Manager and SSM Parameter Store
//! (`SecureString`) served by moto. The resolvers find a name under their prefix, answer
//! `credential_not_found` for a missing one and never reach a name outside the prefix; the
//! `openwop-smoke-byok-roundtrip` fixture runs through the dispatcher on each backend and its
//! events, snapshot and debug bundle carry the hash and length only. Without the emulators the
//! suite is ignored (see `trellis_testkit::external`).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::stack_with_secrets;
use trellis_aws::app::sdk_config;
use trellis_aws::secrets::{ParameterStoreSecrets, SecretsBackend, SecretsManagerSecrets, SecretsSettings};
use trellis_core::secrets::{Secret, SecretRequest, SecretResolver, CANARY_SECRET_ID};
use trellis_testkit::external::{require_emulators, Service};

const CANARY: &str = "CANARY-openwop-CONFORMANCE-NEVER-SECRET";
const RUN_DEADLINE: Duration = Duration::from_secs(30);

fn require() {
    support::require_emulators();
    require_emulators(&[Service::SecretsManager, Service::Ssm]);
}

fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

async fn put_secret(name: &str, value: &str) {
    let client = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    client.create_secret().name(name).secret_string(value).send().await.expect("secret created");
}

async fn put_parameter(name: &str, value: &str) {
    let client = aws_sdk_ssm::Client::new(&sdk_config().await);
    client
        .put_parameter()
        .name(name)
        .value(value)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .expect("parameter put");
}

async fn check_resolver(resolver: &dyn SecretResolver, value: &str) {
    let ask = |reference| SecretRequest { tenant: "default", reference };
    assert_eq!(resolver.resolve(ask("api-token")).await.expect("resolved").expose(), value.as_bytes());
    let missing = resolver.resolve(ask("absent")).await.expect_err("missing");
    assert_eq!((missing.code(), missing.retryable()), ("credential_not_found", false), "{missing}");
    let outside = resolver.resolve(ask("outside")).await.expect_err("outside the prefix");
    assert_eq!(outside.code(), "credential_not_found", "a name outside the prefix is never read");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn secrets_manager_resolves_under_its_prefix() {
    require();
    let prefix = format!("trellis-{}/", suffix());
    let value = format!("{CANARY}-sm");
    put_secret(&format!("{prefix}api-token"), &value).await;
    put_secret(&format!("other-{}/outside", suffix()), "not-for-trellis").await;
    let client = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    check_resolver(&SecretsManagerSecrets::new(client, prefix), &value).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn parameter_store_resolves_secure_strings_under_its_prefix() {
    require();
    let prefix = format!("/trellis-{}/", suffix());
    let value = format!("{CANARY}-ssm");
    put_parameter(&format!("{prefix}api-token"), &value).await;
    put_parameter(&format!("/other-{}/outside", suffix()), "not-for-trellis").await;
    let client = aws_sdk_ssm::Client::new(&sdk_config().await);
    check_resolver(&ParameterStoreSecrets::new(client, prefix), &value).await;
}

fn assert_clean(label: &str, text: &str, cleartext: &str) {
    assert!(!text.contains(cleartext), "{label} carries the cleartext");
    assert!(!text.contains(CANARY), "{label} carries the canary");
}

async fn byok_on(backend: SecretsBackend, prefix: String) {
    let cleartext = format!("{CANARY}-{}", suffix());
    let name = format!("{prefix}{CANARY_SECRET_ID}");
    match backend {
        SecretsBackend::SecretsManager => put_secret(&name, &cleartext).await,
        SecretsBackend::Ssm => put_parameter(&name, &cleartext).await,
        SecretsBackend::None => unreachable!(),
    }
    let mut aws = stack_with_secrets(SecretsSettings { backend, prefix }).await;
    let (status, discovery) = aws.request("GET", "/.well-known/openwop", None, false).await;
    assert_eq!(status, 200);
    assert_eq!(discovery["secrets"], json!({"supported": true, "scopes": ["tenant"], "resolution": "host-managed"}));

    let run_id = aws.create(json!({"workflowId": "openwop-smoke-byok-roundtrip", "inputs": {}})).await;
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let expected = json!({"secretSha256": hex_sha256(&cleartext), "secretLength": cleartext.len()});
    assert_eq!(snapshot["variables"]["resolve-secret"], expected, "{snapshot}");
    let events = aws.debug_events(&run_id).await;
    assert!(!events.is_empty());
    assert_clean("the events", &Value::Array(events).to_string(), &cleartext);
    assert_clean("the snapshot", &aws.snapshot(&run_id).await.to_string(), &cleartext);
    let (status, bundle) = aws.api("GET", &format!("/v1/runs/{run_id}/debug-bundle"), None).await;
    assert_eq!(status, 200, "{bundle}");
    assert_clean("the debug bundle", &bundle.to_string(), &cleartext);
}

fn hex_sha256(text: &str) -> String {
    Secret::new(text).sha256_hex()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn byok_fixture_runs_on_secrets_manager_and_leaks_nothing() {
    require();
    byok_on(SecretsBackend::SecretsManager, format!("trellis-{}/", suffix())).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn byok_fixture_runs_on_parameter_store_and_leaks_nothing() {
    require();
    byok_on(SecretsBackend::Ssm, format!("/trellis-{}/", suffix())).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn without_a_backend_the_fixture_fails_with_credential_unavailable() {
    require();
    let mut aws = stack_with_secrets(SecretsSettings::default()).await;
    let (_, discovery) = aws.request("GET", "/.well-known/openwop", None, false).await;
    assert!(discovery.get("secrets").is_none(), "{}", discovery["secrets"]);
    let run_id = aws.create(json!({"workflowId": "openwop-smoke-byok-roundtrip", "inputs": {}})).await;
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "credential_unavailable", "{snapshot}");
}
