//! Unit tests of `core.http.request`'s config, prepare, outputs and capabilities (no I/O).

use serde_json::{json, Map, Value};
use trellis_core::activity::Activity;
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;

use super::*;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn activity() -> HttpRequestActivity {
    HttpRequestActivity::new(HttpClient::system(HttpSettings::default()))
}

fn invalid(config: Value) -> String {
    match activity().check("n", &object(config)) {
        Err(ConfigIssue::Invalid(message)) => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn prepare(config: Value, inputs: Value, variables: Value) -> Result<Value, trellis_core::run::RunError> {
    let config = object(config);
    let variables = object(variables);
    let context = NodeContext {
        node_id: "n",
        config: &config,
        inputs: object(inputs),
        variables: &variables,
        now: 0,
        configurable: None,
        mocks_allowed: false,
    };
    activity().prepare(&context)
}

#[test]
fn check_accepts_a_full_config() {
    let config = json!({
        "url": "https://api.test/items/{{inputs.id}}",
        "method": "post",
        "headers": {"Authorization": "Bearer {{variables.token}}", "Accept": "application/json"},
        "body": {"name": "{{inputs.name}}", "n": 1},
        "timeoutMs": 5000,
        "expectStatus": [200, 201]
    });
    assert_eq!(activity().check("n", &object(config)), Ok(()));
    assert_eq!(activity().check("n", &object(json!({"url": "http://127.0.0.1:8080/x", "expectStatus": 204}))), Ok(()));
}

#[test]
fn check_names_the_field_and_the_rule() {
    for (config, expected) in [
        (json!({}), "config.url is required"),
        (json!({"url": 3}), "config.url is required"),
        (json!({"url": "ftp://x.test/"}), "config.url must start with http:// or https://"),
        (json!({"url": "file:///etc/passwd"}), "config.url must start with http:// or https://"),
        (json!({"url": "gopher://{{inputs.x}}"}), "config.url must start with http:// or https://"),
        (json!({"url": "https://u:p@x.test/"}), "config.url may not carry credentials"),
        (json!({"url": "https://x.test/{{secrets.a}}"}), "config.url: template placeholder"),
        (json!({"url": "https://x.test/", "method": "TRACE"}), "config.method must be one of GET, POST, PUT, PATCH"),
        (json!({"url": "https://x.test/", "method": 1}), "config.method must be one of"),
        (json!({"url": "https://x.test/", "headers": []}), "config.headers must be an object"),
        (json!({"url": "https://x.test/", "headers": {"a": 1}}), "config.headers.a must be a string"),
        (json!({"url": "https://x.test/", "headers": {"bad name": "x"}}), "not a valid header name"),
        (
            json!({"url": "https://x.test/", "headers": {"Connection": "upgrade"}}),
            "config.headers.Connection is not allowed",
        ),
        (
            json!({"url": "https://x.test/", "headers": {"Upgrade": "websocket"}}),
            "config.headers.Upgrade is not allowed",
        ),
        (json!({"url": "https://x.test/", "headers": {"Host": "other"}}), "config.headers.Host is not allowed"),
        (json!({"url": "https://x.test/", "headers": {"Idempotency-Key": "k"}}), "the host sends it"),
        (json!({"url": "https://x.test/", "headers": {"X": "{{inputs.a"}}), "config.headers.X: unterminated"),
        (json!({"url": "https://x.test/", "body": {"a": ["{{env.X}}"]}}), "config.body.a.0: template placeholder"),
        (json!({"url": "https://x.test/", "timeoutMs": 0}), "config.timeoutMs must be an integer from 1 to 120000"),
        (
            json!({"url": "https://x.test/", "timeoutMs": 120001}),
            "config.timeoutMs must be an integer from 1 to 120000",
        ),
        (json!({"url": "https://x.test/", "timeoutMs": 1.5}), "config.timeoutMs must be an integer"),
        (json!({"url": "https://x.test/", "expectStatus": 99}), "config.expectStatus must be an HTTP status"),
        (json!({"url": "https://x.test/", "expectStatus": []}), "config.expectStatus must be"),
        (json!({"url": "https://x.test/", "expectStatus": "200-299"}), "config.expectStatus must be"),
        (json!({"url": "https://x.test/", "expectStatus": [200, "x"]}), "config.expectStatus must be"),
        (json!({"url": "https://x.test/", "redirect": "follow"}), "config.redirect is not a core.http.request field"),
    ] {
        let message = invalid(config.clone());
        assert!(message.contains(expected), "{config}: {message}");
    }
}

#[test]
fn idempotency_and_timeouts_come_from_the_config() {
    let activity = activity();
    for (method, idempotent) in [
        ("GET", true),
        ("HEAD", true),
        ("PUT", true),
        ("DELETE", true),
        ("OPTIONS", true),
        ("POST", false),
        ("PATCH", false),
    ] {
        let config = object(json!({"url": "https://x.test/", "method": method}));
        assert_eq!(activity.idempotent(&config), idempotent, "{method}");
    }
    assert!(activity.idempotent(&object(json!({"url": "https://x.test/"}))));
    assert_eq!(activity.attempt_timeout_ms(&object(json!({"url": "https://x.test/"}))), 30_000);
    assert_eq!(activity.attempt_timeout_ms(&object(json!({"url": "https://x.test/", "timeoutMs": 750}))), 750);
    assert_eq!(activity.type_id(), "core.http.request");
}

#[test]
fn prepare_renders_url_headers_and_a_typed_body() {
    let request = prepare(
        json!({
            "url": "https://api.test/users/{{inputs.name}}?q={{variables.query}}",
            "method": "PATCH",
            "headers": {"X-User": "{{variables.user.id}}"},
            "body": {"count": "{{inputs.count}}", "user": "{{variables.user}}", "text": "n={{inputs.count}}"},
            "expectStatus": 201
        }),
        json!({"name": "a b/c", "count": 3}),
        json!({"query": "x&y=z", "user": {"id": 7}}),
    )
    .unwrap();
    assert_eq!(
        request,
        json!({
            "url": "https://api.test/users/a%20b%2Fc?q=x%26y%3Dz",
            "method": "PATCH",
            "headers": {"X-User": "7"},
            "body": {"count": 3, "user": {"id": 7}, "text": "n=3"},
            "expectStatus": [201]
        })
    );
    let get = prepare(json!({"url": "http://api.test/"}), json!({}), json!({})).unwrap();
    assert_eq!(get, json!({"url": "http://api.test/", "method": "GET", "headers": {}, "expectStatus": "200-299"}));
}

#[test]
fn a_url_that_is_one_placeholder_takes_the_whole_value_and_is_checked_once_rendered() {
    let request = prepare(json!({"url": "{{inputs.url}}"}), json!({"url": "https://api.test/a b?x=1"}), json!({}));
    assert_eq!(request.unwrap()["url"], "https://api.test/a b?x=1", "a whole URL is not percent-encoded");
    let refused = prepare(json!({"url": "{{inputs.url}}"}), json!({"url": "file:///etc/passwd"}), json!({}));
    assert_eq!(refused.unwrap_err().code, "validation_error");
    let typed = prepare(json!({"url": "{{inputs.url}}"}), json!({"url": 7}), json!({}));
    assert_eq!(typed.unwrap_err().details, Some(json!({"path": "/config/url"})));
    assert!(config::parse(json!({"url": "{{inputs.url}}"}).as_object().unwrap()).is_ok());
    let embedded = config::parse(json!({"url": "{{inputs.host}}/path"}).as_object().unwrap());
    assert!(embedded.unwrap_err().contains("single placeholder"), "an embedded placeholder needs a literal scheme");
}

#[test]
fn prepare_fails_with_the_path_of_an_unresolved_name() {
    for (config, path, name) in [
        (json!({"url": "https://api.test/{{inputs.missing}}"}), "/config/url", "inputs.missing"),
        (
            json!({"url": "https://api.test/", "headers": {"X-A~B": "{{variables.nope}}"}}),
            "/config/headers/X-A~0B",
            "variables.nope",
        ),
        (
            json!({"url": "https://api.test/", "body": {"user": {"id": "{{variables.user.id}}"}}}),
            "/config/body/user/id",
            "variables.user.id",
        ),
    ] {
        let error = prepare(config, json!({}), json!({"user": {}})).unwrap_err();
        assert_eq!(error.code, "validation_error");
        assert!(error.message.contains(name), "{}", error.message);
        assert_eq!(error.details, Some(json!({"path": path, "name": name})));
    }
}

#[test]
fn prepare_refuses_a_rendered_url_or_header_that_is_no_longer_valid() {
    let error = prepare(json!({"url": "http://{{inputs.host}}/"}), json!({"host": ""}), json!({})).unwrap_err();
    assert_eq!(error.code, "validation_error");
    assert_eq!(error.details, Some(json!({"path": "/config/url"})));

    let error = prepare(
        json!({"url": "https://api.test/", "headers": {"Authorization": "Bearer {{inputs.token}}"}}),
        json!({"token": "secret\r\nX-Injected: 1"}),
        json!({}),
    )
    .unwrap_err();
    assert_eq!(error.details, Some(json!({"path": "/config/headers/Authorization"})));
    assert!(!error.message.contains("secret"), "{}", error.message);
}

#[test]
fn capabilities_are_exactly_the_closed_schema_fields() {
    let client = HttpClient::system(HttpSettings { max_response_body_bytes: 4096, ..HttpSettings::default() });
    let blocks = HttpRequestActivity::new(client).capabilities();
    assert_eq!(
        blocks,
        vec![(
            "httpClient",
            json!({
                "supported": true,
                "ssrfGuard": true,
                "maxResponseBodyBytes": 4096,
                "requestTimeoutMs": 120000,
                "methods": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                "safeFetch": {"supported": false}
            })
        )]
    );
}

#[test]
fn outputs_filter_headers_and_parse_json_bodies() {
    let response = InboundResponse {
        status: 200,
        headers: vec![
            ("content-type".into(), "application/problem+json; charset=utf-8".into()),
            ("set-cookie".into(), "session=secret".into()),
            ("cache-control".into(), "no-cache".into()),
            ("cache-control".into(), "private".into()),
            ("x-internal".into(), "1".into()),
        ],
        body: br#"{"a":1}"#.to_vec(),
        body_truncated: false,
    };
    let out = outputs(&response, 12);
    assert_eq!(
        Value::Object(out),
        json!({
            "status": 200,
            "headers": {"content-type": "application/problem+json; charset=utf-8", "cache-control": "no-cache, private"},
            "body": {"a": 1},
            "bodyTruncated": false,
            "durationMs": 12
        })
    );
    let not_json = InboundResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: b"{\"a\":".to_vec(),
        body_truncated: true,
    };
    assert_eq!(outputs(&not_json, 0)["body"], json!("{\"a\":"));
    assert!(!is_json_media_type("text/json-ish"));
    assert!(is_json_media_type("Application/JSON"));
}

#[test]
fn text_drops_a_character_cut_at_the_end() {
    let mut body = "héllo".as_bytes().to_vec();
    body.extend_from_slice(&"é".as_bytes()[..1]);
    assert_eq!(text(&body), "héllo");
    assert_eq!(text(b"a\xffb"), "a\u{fffd}b");
}
