//! `conformance.secret.echo` (fixture `openwop-smoke-byok-roundtrip`): resolves
//! `config.secretId` through the host's [`SecretResolver`] and outputs only
//! `{secretSha256, secretLength}` (SHA-256 hex and byte length), never the value; the outputs
//! land in the run's variables under the node id like any activity's.
//!
//! On a host without a resolver the node fails before any attempt with
//! `credential_unavailable`; an unknown id fails the attempt with `credential_not_found`.
//!
//! The hash and the length of a secret are more than a production host should hand to any
//! workflow author (a low-entropy secret's hash can be guessed offline), so the hosts register
//! this kind only when they run conformance (`OPENWOP_TEST_SEAM_ENABLED`); elsewhere it is an
//! unknown kind and discovery does not list it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;
use trellis_core::secrets::{self, check_ref, SecretError, SecretResolver};

/// The node's `typeId`.
pub const TYPE_ID: &str = "conformance.secret.echo";

/// One attempt's budget.
const TIMEOUT_MS: u64 = 10_000;

/// The `conformance.secret.echo` executor.
#[derive(Debug, Clone, Default)]
pub struct SecretEchoActivity {
    resolver: Option<Arc<dyn SecretResolver>>,
}

impl SecretEchoActivity {
    /// An executor resolving through `resolver` (`None`: this host has no secrets).
    pub fn new(resolver: Option<Arc<dyn SecretResolver>>) -> Self {
        Self { resolver }
    }
}

fn secret_id(config: &Map<String, Value>) -> Result<&str, String> {
    if let Some(unknown) = config.keys().find(|key| *key != "secretId") {
        return Err(format!("config.{unknown} is not a {TYPE_ID} field (allowed: secretId)"));
    }
    let Some(Value::String(id)) = config.get("secretId") else {
        return Err("config.secretId is required and must be a string".to_owned());
    };
    check_ref(id).map_err(|reason| format!("config.secretId {reason}"))?;
    Ok(id)
}

#[async_trait]
impl Activity for SecretEchoActivity {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        secret_id(config).map(drop).map_err(ConfigIssue::Invalid)
    }

    fn idempotent(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, _config: &Map<String, Value>) -> u64 {
        TIMEOUT_MS
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let id = secret_id(context.config).map_err(|message| RunError::new("validation_error", message))?;
        if self.resolver.is_none() {
            return Err(SecretError::NotConfigured { reference: id.to_owned() }.to_run_error());
        }
        Ok(json!({ "secretId": id }))
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let id = call
            .request
            .get("secretId")
            .and_then(Value::as_str)
            .ok_or_else(|| ActivityError::new("validation_error", "the prepared request has no secretId", false))?;
        let secret = secrets::resolve_with(self.resolver.as_deref(), &call.tenant, id)
            .await
            .map_err(|error| error.to_activity_error())?;
        let mut outputs = Map::new();
        outputs.insert("secretSha256".to_owned(), json!(secret.sha256_hex()));
        outputs.insert("secretLength".to_owned(), json!(secret.len()));
        Ok(outputs)
    }

    fn capabilities(&self) -> Vec<(&'static str, Value)> {
        self.resolver.as_ref().map(|_| ("secrets", secrets::capability())).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::EnvSecrets;
    use sha2::{Digest, Sha256};
    use trellis_core::activity::{idempotency_key, NoProgress};

    fn config(id: &str) -> Map<String, Value> {
        json!({ "secretId": id }).as_object().cloned().unwrap()
    }

    fn call(request: Value) -> ActivityCall {
        ActivityCall {
            run_id: "run-1".into(),
            node_id: "resolve-secret".into(),
            type_id: TYPE_ID.into(),
            activation: 0,
            attempt: 0,
            idempotency_key: idempotency_key("run-1", "resolve-secret", 0),
            request,
            timeout_ms: TIMEOUT_MS,
            tenant: "default".into(),
            credentials_ref: None,
        }
    }

    fn prepare(activity: &SecretEchoActivity, id: &str) -> Result<Value, RunError> {
        let config = config(id);
        let variables = Map::new();
        activity.prepare(&NodeContext {
            node_id: "n",
            config: &config,
            inputs: Map::new(),
            variables: &variables,
            now: 0,
            configurable: None,
            mocks_allowed: false,
        })
    }

    #[tokio::test]
    async fn emits_only_the_hash_and_the_length() {
        let resolver: Arc<dyn SecretResolver> = Arc::new(EnvSecrets::from_vars(
            &["default"],
            [("TRELLIS_SECRET_OPENWOP_CONFORMANCE_CANARY_SECRET", "canary-value-123")],
        ));
        let activity = SecretEchoActivity::new(Some(resolver));
        let request = prepare(&activity, secrets::CANARY_SECRET_ID).unwrap();
        assert!(!request.to_string().contains("canary-value"));
        let outputs = activity.execute(&call(request), &NoProgress).await.unwrap();
        let expected = hex::encode(Sha256::digest(b"canary-value-123"));
        assert_eq!(Value::Object(outputs), json!({ "secretSha256": expected, "secretLength": 16 }));
        assert_eq!(activity.capabilities(), vec![("secrets", secrets::capability())]);

        let missing = activity.execute(&call(json!({ "secretId": "nope" })), &NoProgress).await.unwrap_err();
        assert_eq!((missing.code.as_str(), missing.retryable), ("credential_not_found", false));
    }

    #[test]
    fn without_a_resolver_the_node_is_refused_with_credential_unavailable() {
        let activity = SecretEchoActivity::new(None);
        let error = prepare(&activity, secrets::CANARY_SECRET_ID).unwrap_err();
        assert_eq!(error.code, "credential_unavailable");
        assert!(activity.capabilities().is_empty(), "no secrets block without a resolver");
    }

    #[test]
    fn config_is_checked() {
        let activity = SecretEchoActivity::new(None);
        assert!(activity.check("n", &config("ok-id")).is_ok());
        for bad in [json!({}), json!({ "secretId": "a/b" }), json!({ "secretId": "x", "more": 1 })] {
            assert!(activity.check("n", bad.as_object().unwrap()).is_err(), "{bad}");
        }
    }
}
