//! `core.http.request` `config.auth`: the node's `credentialsRef` resolved for the attempt and
//! sent as `bearer`, `basic` or a named header, against a loopback server; a missing secret
//! or a host without a resolver fails before any call, and the secret never reaches the
//! prepared request, the outputs or the errors.

mod support;

use std::sync::Arc;

use serde_json::{json, Value};
use support::{object, Harness};
use trellis_activities::secrets::EnvSecrets;
use trellis_core::activity::{idempotency_key, Activity, ActivityCall, ActivityResult, NoProgress};
use trellis_core::secrets::SecretResolver;
use trellis_testkit::http_server::Reply;

const TOKEN: &str = "tok-CANARY-9f8e7d";

async fn harness() -> Harness {
    let mut harness = Harness::new().await;
    let secrets: Arc<dyn SecretResolver> = Arc::new(EnvSecrets::from_vars(
        &["default"],
        [("TRELLIS_SECRET_API_TOKEN", TOKEN), ("TRELLIS_SECRET_BASIC", "user:pa ss")],
    ));
    harness.activity = harness.activity.clone().with_secrets(Some(secrets));
    harness.server.route("/r", vec![Reply::json(200, &json!({"ok": true}))]);
    harness
}

async fn execute(harness: &Harness, request: Value, credentials_ref: Option<&str>) -> ActivityResult {
    let call = ActivityCall {
        run_id: "run-1".into(),
        node_id: "n".into(),
        type_id: "core.http.request".into(),
        activation: 0,
        attempt: 0,
        idempotency_key: idempotency_key("run-1", "n", 0),
        request,
        timeout_ms: 5_000,
        tenant: "default".into(),
        credentials_ref: credentials_ref.map(str::to_owned),
    };
    harness.activity.execute(&call, &NoProgress).await
}

#[tokio::test]
async fn each_scheme_sends_the_resolved_secret_only_on_the_wire() {
    let harness = harness().await;
    let cases = [
        (json!({"scheme": "bearer"}), "api-token", "authorization", format!("Bearer {TOKEN}")),
        (json!({"scheme": "basic"}), "basic", "authorization", "Basic dXNlcjpwYSBzcw==".to_owned()),
        (json!({"scheme": "header", "header": "X-Api-Key"}), "api-token", "x-api-key", TOKEN.to_owned()),
    ];
    for (index, (auth, reference, header, expected)) in cases.into_iter().enumerate() {
        let config = json!({"url": harness.url("/r"), "auth": auth});
        assert!(harness.activity.needs_credentials(&object(config.clone())));
        let request = harness.prepare(&config, json!({}), &json!({})).expect("prepared");
        assert!(!request.to_string().contains(TOKEN), "the prepared request holds no secret: {request}");
        assert_eq!(request["auth"], auth);
        let outputs = execute(&harness, request, Some(reference)).await.expect("completed");
        assert!(!Value::Object(outputs).to_string().contains(TOKEN));
        assert_eq!(harness.server.requests()[index].header(header), Some(expected.as_str()), "{header}");
    }
    harness.assert_no_violations();
}

#[tokio::test]
async fn a_missing_secret_fails_before_any_call() {
    let harness = harness().await;
    let request = harness
        .prepare(&json!({"url": harness.url("/r"), "auth": {"scheme": "bearer"}}), json!({}), &json!({}))
        .unwrap();
    let error = execute(&harness, request.clone(), Some("absent")).await.expect_err("not found");
    assert_eq!((error.code.as_str(), error.retryable), ("credential_not_found", false));
    assert_eq!(error.details, Some(json!({"credentialsRef": "absent"})));
    let error = execute(&harness, request, None).await.expect_err("no ref");
    assert_eq!(error.code, "credential_required");
    assert!(harness.server.requests().is_empty(), "no call was made");
    assert!(harness.connector.connects().is_empty(), "no connection was opened");
}

#[tokio::test]
async fn a_host_without_secrets_refuses_the_node_with_credential_unavailable() {
    let harness = Harness::new().await;
    let config = object(json!({"url": harness.url("/r"), "auth": {"scheme": "bearer"}}));
    let variables = serde_json::Map::new();
    let context = trellis_core::nodes::NodeContext {
        node_id: "n",
        config: &config,
        inputs: serde_json::Map::new(),
        variables: &variables,
        now: 0,
        configurable: None,
        mocks_allowed: false,
    };
    let error = harness.activity.prepare(&context).expect_err("refused");
    assert_eq!(error.code, "credential_unavailable");
    assert!(harness.activity.capabilities().iter().all(|(block, _)| *block != "secrets"));
    assert!(harness.server.requests().is_empty());
}

#[tokio::test]
async fn secrets_are_advertised_with_a_resolver() {
    let harness = harness().await;
    let blocks = harness.activity.capabilities();
    let secrets = blocks.iter().find(|(block, _)| *block == "secrets").map(|(_, value)| value.clone());
    assert_eq!(secrets, Some(json!({"supported": true, "scopes": ["tenant"], "resolution": "host-managed"})));
}

#[test]
fn auth_config_is_checked_at_registration() {
    use trellis_activities::http::config::parse;
    let url = "https://api.example.com/";
    let refused = [
        (json!({"url": url, "auth": "bearer"}), "config.auth must be an object"),
        (json!({"url": url, "auth": {"scheme": "digest"}}), "config.auth.scheme must be one of"),
        (json!({"url": url, "auth": {"scheme": "header"}}), "config.auth.header is required"),
        (json!({"url": url, "auth": {"scheme": "bearer", "header": "X"}}), "only for scheme `header`"),
        (json!({"url": url, "auth": {"scheme": "header", "header": "bad name"}}), "not a valid header name"),
        (json!({"url": url, "auth": {"scheme": "header", "header": "Idempotency-Key"}}), "set by the host"),
        (json!({"url": url, "auth": {"scheme": "bearer", "x": 1}}), "config.auth.x is not an auth field"),
        (
            json!({"url": url, "auth": {"scheme": "bearer"}, "headers": {"authorization": "Bearer {{variables.t}}"}}),
            "set by config.auth",
        ),
    ];
    for (config, expected) in refused {
        let error = parse(&object(config.clone())).expect_err(&config.to_string());
        assert!(error.contains(expected), "{config}: {error}");
    }
    assert!(parse(&object(json!({"url": url, "auth": {"scheme": "header", "header": "X-Api-Key"}}))).is_ok());
}

#[tokio::test]
async fn registration_checks_credentials_ref() {
    use trellis_core::model::{Bounds, Workflow};
    use trellis_core::nodes::NodeRegistry;
    use trellis_core::DefinitionError;
    let harness = harness().await;
    let registry = NodeRegistry::new().register(Arc::new(harness.activity));
    let workflow = |node: Value| json!({"id": "w", "name": "w", "nodes": [node], "edges": []});
    let http = |extra: Value| {
        let mut node = json!({"id": "call", "typeId": "core.http.request",
            "config": {"url": "https://api.example.com/", "auth": {"scheme": "bearer"}}});
        node.as_object_mut().unwrap().extend(object(extra));
        node
    };
    let compile = |document| Workflow::compile_with(document, &registry, Bounds::default());

    assert!(compile(workflow(http(json!({"credentialsRef": "api-token"})))).is_ok());
    for (extra, expected) in [
        (json!({}), "needs a credentialsRef"),
        (json!({"credentialsRef": "a/b"}), "credentialsRef must be"),
        (json!({"credentialsRef": ""}), "credentialsRef must be"),
    ] {
        match compile(workflow(http(extra.clone()))) {
            Err(DefinitionError::Invalid { path, rule, message }) => {
                assert_eq!((path.as_str(), rule), ("/nodes/0/credentialsRef", "credentials_ref"), "{extra}");
                assert!(message.contains(expected), "{extra}: {message}");
            }
            other => panic!("{extra}: {other:?}"),
        }
    }
    // The schema types the field: a non-string is refused there.
    assert!(matches!(compile(workflow(http(json!({"credentialsRef": 5})))), Err(DefinitionError::Schema { .. })));
}
