//! `credentialsRef` on the emulated AWS stack: Secrets Manager and SSM Parameter Store
//! (`SecureString`) served by moto. The resolvers find a name in the run's tenant's folder of
//! their prefix, answer `credential_not_found` for a missing one, for another tenant's secret
//! and for a name outside the folder (the prefix's root, another prefix); the
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

/// The names each resolver test puts under `prefix` (and one under another prefix).
fn names(prefix: &str, other_prefix: &str, value: &str) -> Vec<(String, String)> {
    vec![
        (format!("{prefix}default/api-token"), value.to_owned()),
        (format!("{prefix}acme/acme-token"), format!("{value}-acme")),
        (format!("{prefix}root-level"), "not-in-a-tenant-folder".to_owned()),
        (format!("{other_prefix}default/outside"), "not-for-trellis".to_owned()),
    ]
}

async fn check_resolver(resolver: &dyn SecretResolver, value: &str) {
    let ask = |tenant, reference| SecretRequest { tenant, reference };
    assert_eq!(resolver.resolve(ask("default", "api-token")).await.expect("resolved").expose(), value.as_bytes());
    let missing = resolver.resolve(ask("default", "absent")).await.expect_err("missing");
    assert_eq!((missing.code(), missing.retryable()), ("credential_not_found", false), "{missing}");
    for reference in ["outside", "root-level"] {
        let outside = resolver.resolve(ask("default", reference)).await.expect_err("outside the folder");
        assert_eq!(outside.code(), "credential_not_found", "{reference}: a name outside the tenant's folder");
    }

    // Tenant scoping: acme's secret is acme's alone, and default's is not acme's.
    let own = resolver.resolve(ask("acme", "acme-token")).await.expect("acme resolves its own");
    assert_eq!(own.expose(), format!("{value}-acme").as_bytes());
    let other = resolver.resolve(ask("default", "acme-token")).await.expect_err("another tenant's secret");
    assert_eq!(other.code(), "credential_not_found", "{other}");
    let other = resolver.resolve(ask("acme", "api-token")).await.expect_err("another tenant's secret");
    assert_eq!(other.code(), "credential_not_found", "{other}");
    // A tenant id that is not a plain name cannot step into another folder.
    let climbing = resolver.resolve(ask("acme/../default", "api-token")).await.expect_err("not a folder name");
    assert_eq!(climbing.code(), "credential_not_found", "{climbing}");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn secrets_manager_resolves_in_the_tenants_folder_only() {
    require();
    let prefix = format!("trellis-{}/", suffix());
    let value = format!("{CANARY}-sm");
    for (name, secret) in names(&prefix, &format!("other-{}/", suffix()), &value) {
        put_secret(&name, &secret).await;
    }
    let client = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    check_resolver(&SecretsManagerSecrets::new(client, prefix), &value).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn parameter_store_resolves_secure_strings_in_the_tenants_folder_only() {
    require();
    let prefix = format!("/trellis-{}/", suffix());
    let value = format!("{CANARY}-ssm");
    for (name, secret) in names(&prefix, &format!("/other-{}/", suffix()), &value) {
        put_parameter(&name, &secret).await;
    }
    let client = aws_sdk_ssm::Client::new(&sdk_config().await);
    check_resolver(&ParameterStoreSecrets::new(client, prefix), &value).await;
}

fn assert_clean(label: &str, text: &str, cleartext: &str) {
    assert!(!text.contains(cleartext), "{label} carries the cleartext");
    assert!(!text.contains(CANARY), "{label} carries the canary");
}

async fn byok_on(backend: SecretsBackend, prefix: String) {
    let cleartext = format!("{CANARY}-{}", suffix());
    // The stack's key acts for tenant `default`.
    let name = format!("{prefix}default/{CANARY_SECRET_ID}");
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
