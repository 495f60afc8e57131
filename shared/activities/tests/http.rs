//! `core.http.request` against a loopback test server: outputs, statuses, timeouts,
//! redirects, the body cap, the host's headers and template rendering.

mod support;

use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use hyper::Method;
use serde_json::json;
use support::{Harness, HOST};
use trellis_activities::http::{HttpClient, HttpError, HttpSettings, OutboundRequest};
use trellis_core::activity::idempotency_key;
use trellis_testkit::http_server::Reply;
use trellis_testkit::net::{RecordingConnector, ScriptedResolver};

#[tokio::test]
async fn a_get_completes_with_status_filtered_headers_and_the_json_body() {
    let harness = Harness::new().await;
    harness.server.route(
        "/items",
        vec![Reply::json(200, &json!({"items": [1, 2]}))
            .header("set-cookie", "session=secret")
            .header("etag", "\"v1\"")
            .header("x-request-id", "req-9")
            .header("x-internal-debug", "leak")],
    );
    let outputs = harness.run(json!({"url": harness.url("/items?page=2")})).await.expect("completed");

    assert_eq!(outputs["status"], 200);
    assert_eq!(outputs["body"], json!({"items": [1, 2]}));
    assert_eq!(outputs["bodyTruncated"], false);
    assert!(outputs["durationMs"].is_u64());
    let headers = outputs["headers"].as_object().expect("headers");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["etag"], "\"v1\"");
    assert_eq!(headers["x-request-id"], "req-9");
    assert_eq!(headers["content-length"], "15");
    assert!(!headers.contains_key("set-cookie") && !headers.contains_key("x-internal-debug"), "{headers:?}");
    assert!(!serde_json::to_string(&outputs).unwrap().contains("secret"));

    let seen = harness.server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/items?page=2");
    assert_eq!(seen[0].header("host"), Some(format!("{HOST}:{}", harness.server.port()).as_str()));
    assert_eq!(harness.resolver.resolutions(HOST), 1);
    assert_eq!(harness.connector.connects(), vec![harness.server.addr()]);
    harness.assert_no_violations();
}

#[tokio::test]
async fn a_status_outside_the_default_range_fails_and_says_whether_to_retry() {
    let harness = Harness::new().await;
    for (status, retryable) in
        [(404, false), (400, false), (408, true), (425, true), (429, true), (500, true), (503, true)]
    {
        harness.server.route("/s", vec![Reply::json(status, &json!({"error": "nope"}))]);
        let error = harness.run(json!({"url": harness.url("/s")})).await.expect_err("failed");
        assert_eq!(error.code, "http_unexpected_status", "{status}");
        assert_eq!(error.retryable, retryable, "{status}");
        let details = error.details.expect("details");
        assert_eq!(details["actual"], status);
        assert_eq!(details["expected"], "200-299");
        assert_eq!(details["response"]["status"], status);
        assert_eq!(details["response"]["body"], json!({"error": "nope"}));
        assert_eq!(details["response"]["bodyTruncated"], false);
        assert_eq!(details["response"]["headers"]["content-type"], "application/json");
    }
    harness.assert_no_violations();
}

#[tokio::test]
async fn expect_status_decides_which_statuses_complete() {
    let harness = Harness::new().await;
    harness.server.route("/missing", vec![Reply::text(404, "not here")]);
    let outputs = harness.run(json!({"url": harness.url("/missing"), "expectStatus": [404, 410]})).await.expect("done");
    assert_eq!(outputs["status"], 404);
    assert_eq!(outputs["body"], "not here");

    harness.server.route("/ok", vec![Reply::status(200)]);
    let error = harness.run(json!({"url": harness.url("/ok"), "expectStatus": 201})).await.expect_err("201 only");
    assert_eq!(error.code, "http_unexpected_status");
    assert!(!error.retryable);
    assert_eq!(error.details.as_ref().unwrap()["expected"], json!([201]));
    assert_eq!(error.details.as_ref().unwrap()["actual"], 200);
}

#[tokio::test]
async fn a_slow_server_fails_the_attempt_with_a_retryable_timeout() {
    let harness = Harness::new().await;
    harness.server.route("/slow", vec![Reply::json(200, &json!({})).delay(Duration::from_secs(5))]);
    let request = harness.prepare(&json!({"url": harness.url("/slow")}), json!({}), &json!({})).unwrap();
    let error = harness.execute(request, 0, 200).await.expect_err("timed out");
    assert_eq!(error.code, "http_timeout");
    assert!(error.retryable);
    assert_eq!(error.details.as_ref().unwrap()["timeoutMs"], 200);
    assert_eq!(harness.server.requests_to("/slow").len(), 1, "the request was sent");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let harness = Harness::new().await;
    let target = harness.url("/target");
    harness.server.route("/moved", vec![Reply::status(302).header("location", &target)]);
    harness.server.route("/target", vec![Reply::json(200, &json!({"followed": true}))]);

    let error = harness.run(json!({"url": harness.url("/moved")})).await.expect_err("a 302 is unexpected");
    assert_eq!(error.code, "http_unexpected_status");
    assert!(!error.retryable);
    let details = error.details.unwrap();
    assert_eq!(details["actual"], 302);
    assert_eq!(details["response"]["headers"]["location"], target);
    assert!(harness.server.requests_to("/target").is_empty(), "the redirect was followed");

    // Accepting 3xx hands the redirect to the workflow.
    let outputs = harness.run(json!({"url": harness.url("/moved"), "expectStatus": 302})).await.expect("302 expected");
    assert_eq!(outputs["headers"]["location"], target);
    assert!(harness.server.requests_to("/target").is_empty());
}

#[tokio::test]
async fn a_body_past_the_cap_is_cut_and_flagged() {
    let harness = Harness::with("127.0.0.1/32", 1000).await;
    harness.server.route("/big", vec![Reply::text(200, &"x".repeat(5000))]);
    let outputs = harness.run(json!({"url": harness.url("/big")})).await.expect("completed");
    assert_eq!(outputs["bodyTruncated"], true);
    assert_eq!(outputs["body"].as_str().unwrap().len(), 1000);

    harness.server.route("/exact", vec![Reply::text(200, &"y".repeat(1000))]);
    let outputs = harness.run(json!({"url": harness.url("/exact")})).await.expect("completed");
    assert_eq!(outputs["bodyTruncated"], false);
    assert_eq!(outputs["body"].as_str().unwrap().len(), 1000);
}

#[tokio::test]
async fn every_attempt_sends_the_same_idempotency_key_and_its_attempt_number() {
    let harness = Harness::new().await;
    harness.server.route("/pay", vec![Reply::status(503), Reply::json(201, &json!({"id": "p1"}))]);
    let config = json!({"url": harness.url("/pay"), "method": "POST", "body": {"amount": 5}});
    let request = harness.prepare(&config, json!({}), &json!({})).unwrap();

    let first = harness.execute(request.clone(), 0, 5_000).await.expect_err("503");
    assert!(first.retryable);
    let second = harness.execute(request, 1, 5_000).await.expect("201");
    assert_eq!(second["body"], json!({"id": "p1"}));

    let seen = harness.server.requests_to("/pay");
    assert_eq!(seen.len(), 2);
    let key = idempotency_key("run-1", "n", 0);
    assert_eq!(seen[0].header("idempotency-key"), Some(key.as_str()));
    assert_eq!(seen[1].header("idempotency-key"), Some(key.as_str()));
    assert_eq!(seen[0].header("trellis-attempt"), Some("0"));
    assert_eq!(seen[1].header("trellis-attempt"), Some("1"));
}

#[tokio::test]
async fn templates_encode_url_values_and_keep_body_types() {
    let harness = Harness::new().await;
    harness.server.route("/users/a b/c", vec![Reply::status(404)]);
    harness.server.route("/users/a%20b%2Fc", vec![Reply::json(200, &json!({"ok": true}))]);
    let config = json!({
        "url": format!("{}?q={{{{variables.query}}}}", harness.url("/users/{{inputs.name}}")),
        "method": "PUT",
        "headers": {"X-Trace": "t-{{variables.user.id}}"},
        "body": {"count": "{{inputs.count}}", "user": "{{variables.user}}", "label": "n={{inputs.count}}"}
    });
    let request = harness
        .prepare(&config, json!({"name": "a b/c", "count": 3}), &json!({"query": "x&y", "user": {"id": 7}}))
        .unwrap();
    let outputs = harness.execute(request, 0, 5_000).await.expect("completed");
    assert_eq!(outputs["status"], 200);

    let seen = &harness.server.requests()[0];
    assert_eq!(seen.method, "PUT");
    assert_eq!(seen.target, "/users/a%20b%2Fc?q=x%26y");
    assert_eq!(seen.header("x-trace"), Some("t-7"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.json(), json!({"count": 3, "user": {"id": 7}, "label": "n=3"}));
}

#[tokio::test]
async fn a_string_body_is_sent_as_is() {
    let harness = Harness::new().await;
    harness.server.route("/raw", vec![Reply::status(204)]);
    let config = json!({
        "url": harness.url("/raw"),
        "method": "POST",
        "headers": {"Content-Type": "text/csv"},
        "body": "a,b\n{{inputs.n}},2"
    });
    let request = harness.prepare(&config, json!({"n": 1}), &json!({})).unwrap();
    let outputs = harness.execute(request, 0, 5_000).await.expect("completed");
    assert_eq!(outputs["status"], 204);
    assert_eq!(outputs["body"], "");
    let seen = &harness.server.requests()[0];
    assert_eq!(seen.body, b"a,b\n1,2");
    assert_eq!(seen.header("content-type"), Some("text/csv"));
}

#[tokio::test]
async fn an_unresolved_name_fails_before_any_traffic() {
    let harness = Harness::new().await;
    let config = json!({"url": harness.url("/x"), "method": "POST", "body": {"id": "{{variables.user.id}}"}});
    let error = harness.prepare(&config, json!({}), &json!({"user": {}})).expect_err("unresolved");
    assert_eq!(error.code, "validation_error");
    assert!(error.message.contains("variables.user.id"), "{}", error.message);
    assert_eq!(error.details, Some(json!({"path": "/config/body/id", "name": "variables.user.id"})));
    assert_eq!(harness.resolver.total_resolutions(), 0);
    assert!(harness.connector.connects().is_empty());
}

#[tokio::test]
async fn credentials_never_reach_outputs_or_errors() {
    let harness = Harness::new().await;
    harness.server.route("/fail", vec![Reply::json(500, &json!({"error": "boom"})).header("set-cookie", "s=1")]);
    let config = json!({
        "url": format!("{}?token={{{{variables.token}}}}", harness.url("/fail")),
        "headers": {"Authorization": "Bearer {{variables.token}}", "Cookie": "c={{variables.token}}"}
    });
    let request = harness.prepare(&config, json!({}), &json!({"token": "s3cr3t"})).unwrap();
    let error = harness.execute(request, 0, 5_000).await.expect_err("500");
    assert_eq!(error.code, "http_unexpected_status");
    let text = serde_json::to_string(&error).unwrap();
    assert!(!text.contains("s3cr3t") && !text.contains("s=1"), "{text}");
    assert_eq!(harness.server.requests()[0].header("authorization"), Some("Bearer s3cr3t"));

    harness.server.route("/slow", vec![Reply::status(200).delay(Duration::from_secs(5))]);
    let config = json!({"url": format!("{}?token={{{{variables.token}}}}", harness.url("/slow"))});
    let request = harness.prepare(&config, json!({}), &json!({"token": "s3cr3t"})).unwrap();
    let error = harness.execute(request, 0, 100).await.expect_err("timeout");
    let text = serde_json::to_string(&error).unwrap();
    assert!(!text.contains("s3cr3t"), "{text}");
}

#[tokio::test]
async fn head_and_options_work() {
    let harness = Harness::new().await;
    harness.server.route("/h", vec![Reply::text(200, "ignored by HEAD")]);
    let outputs = harness.run(json!({"url": harness.url("/h"), "method": "HEAD"})).await.expect("completed");
    assert_eq!(outputs["status"], 200);
    assert_eq!(outputs["body"], "");
    let outputs = harness.run(json!({"url": harness.url("/h"), "method": "OPTIONS"})).await.expect("completed");
    assert_eq!(outputs["status"], 200);
    let methods: Vec<String> = harness.server.requests().iter().map(|request| request.method.clone()).collect();
    assert_eq!(methods, ["HEAD", "OPTIONS"]);
}

fn client() -> (HttpClient, Arc<RecordingConnector>) {
    let resolver = Arc::new(ScriptedResolver::new());
    resolver.answer(HOST, &["127.0.0.1"]);
    let connector = Arc::new(RecordingConnector::new());
    let settings = HttpSettings {
        allow: trellis_activities::http::AllowList::parse("127.0.0.1").unwrap(),
        ..HttpSettings::default()
    };
    (HttpClient::new(settings, resolver, connector.clone()), connector)
}

fn request(url: &str, headers: &[(&'static str, &'static str)]) -> OutboundRequest {
    OutboundRequest {
        method: Method::GET,
        url: url.to_owned(),
        headers: headers
            .iter()
            .map(|(name, value)| (HeaderName::from_static(name), HeaderValue::from_static(value)))
            .collect(),
        body: Default::default(),
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn the_client_refuses_upgrades_other_schemes_and_userinfo_without_connecting() {
    let (client, connector) = client();
    for headers in [&[("connection", "Upgrade")][..], &[("upgrade", "websocket")], &[("host", "other.test")]] {
        let error = client.send(request("http://api.test/", headers)).await.expect_err("refused");
        assert!(matches!(error, HttpError::Invalid(_)), "{error:?}");
        assert_eq!(error.code(), "validation_error");
    }
    for (url, reason) in
        [("ftp://api.test/x", "scheme"), ("file:///etc/passwd", "scheme"), ("http://user:pw@api.test/?q=1", "userinfo")]
    {
        let error = client.send(request(url, &[])).await.expect_err("refused");
        assert_eq!(error.code(), "http_url_rejected", "{url}");
        assert!(!error.retryable());
        let details = error.details().unwrap();
        assert_eq!(details["reason"], reason, "{url}");
        let shown: &str = details["url"].as_str().unwrap();
        assert!(!shown.contains("pw") && !shown.contains("q=1"), "{shown}");
    }
    assert!(connector.connects().is_empty());
}

#[tokio::test]
async fn a_refused_connection_is_a_retryable_network_error() {
    let harness = Harness::new().await;
    // A port nothing listens on: bind one, then free it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = harness.run(json!({"url": format!("http://{HOST}:{port}/")})).await.expect_err("refused");
    assert_eq!(error.code, "http_network_error");
    assert!(error.retryable);
    assert_eq!(error.details, Some(json!({"url": format!("http://{HOST}:{port}/")})));
}
