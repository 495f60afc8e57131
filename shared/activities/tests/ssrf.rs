//! The SSRF guard end to end: refused answers never reach the connector, every answer is
//! checked, metadata is never allowed, and the checked address is the one connected
//! (rebinding). Nothing leaves loopback: the recording connector refuses (and records) any
//! other address, and every test asserts it recorded none.

mod support;

use serde_json::json;
use support::Harness;
use trellis_core::activity::ActivityError;

fn assert_rejected(error: &ActivityError, address: &str, reason: &str) {
    assert_eq!(error.code, "http_url_rejected", "{address}: {error:?}");
    assert!(!error.retryable, "{address}");
    let details = error.details.as_ref().expect("details");
    assert_eq!(details["reason"], reason, "{address}");
    assert_eq!(details["address"], address, "{address}");
}

#[tokio::test]
async fn names_answering_internal_addresses_are_refused_without_connecting() {
    let harness = Harness::with("", 1 << 20).await;
    for (address, reason) in [
        ("127.0.0.1", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.10.10", "link-local"),
        ("fd12::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("100.64.1.1", "shared-address"),
    ] {
        let name = format!("evil-{}.test", address.replace([':', '.'], "-"));
        harness.resolver.answer(&name, &[address]);
        let config = json!({"url": format!("https://{name}/path?token=abc#frag")});
        let error = harness.run(config).await.expect_err("refused");
        assert_rejected(&error, address, reason);
        let details = error.details.unwrap();
        assert_eq!(details["host"], name.as_str());
        assert_eq!(details["url"], format!("https://{name}/path"), "no query or fragment in errors");
        assert_eq!(harness.resolver.resolutions(&name), 1);
    }
    assert!(harness.connector.connects().is_empty(), "{:?}", harness.connector.connects());
    harness.assert_no_violations();
    assert!(harness.server.requests().is_empty());
}

#[tokio::test]
async fn ip_literal_hosts_are_checked_without_resolving() {
    let harness = Harness::with("", 1 << 20).await;
    let port = harness.server.port();
    for (url, address, reason) in [
        (format!("http://127.0.0.1:{port}/"), "127.0.0.1", "loopback"),
        // WHATWG number forms are normalised before the check.
        (format!("http://2130706433:{port}/"), "127.0.0.1", "loopback"),
        (format!("http://0x7f.1:{port}/"), "127.0.0.1", "loopback"),
        ("http://[::ffff:169.254.169.254]/latest/meta-data".to_owned(), "::ffff:169.254.169.254", "metadata"),
        ("http://169.254.169.254/latest/meta-data/iam".to_owned(), "169.254.169.254", "metadata"),
        ("http://[fd00:ec2::254]/".to_owned(), "fd00:ec2::254", "metadata"),
        ("http://[::1]:9/".to_owned(), "::1", "loopback"),
        ("http://10.1.2.3/".to_owned(), "10.1.2.3", "private"),
    ] {
        let error = harness.run(json!({ "url": url })).await.expect_err("refused");
        assert_rejected(&error, address, reason);
    }
    assert_eq!(harness.resolver.total_resolutions(), 0);
    assert!(harness.connector.connects().is_empty());
    harness.assert_no_violations();
}

#[tokio::test]
async fn one_blocked_answer_refuses_the_whole_name() {
    let harness = Harness::new().await;
    harness.resolver.answer("mixed.test", &["93.184.216.34", "10.0.0.5"]);
    harness.resolver.answer("mixed-first.test", &["192.168.0.9", "93.184.216.34"]);
    harness.resolver.answer("mixed-loopback.test", &["127.0.0.1", "169.254.169.254"]);

    let error = harness.run(json!({"url": "http://mixed.test/"})).await.expect_err("refused");
    assert_rejected(&error, "10.0.0.5", "private");
    let error = harness.run(json!({"url": "http://mixed-first.test/"})).await.expect_err("refused");
    assert_rejected(&error, "192.168.0.9", "private");
    // 127.0.0.1 is allow-listed here; the metadata answer still refuses the name.
    let error = harness.run(json!({"url": "http://mixed-loopback.test/"})).await.expect_err("refused");
    assert_rejected(&error, "169.254.169.254", "metadata");

    assert!(harness.connector.connects().is_empty());
    harness.assert_no_violations();
}

#[tokio::test]
async fn metadata_is_refused_even_when_its_network_is_allow_listed() {
    let harness = Harness::with("169.254.0.0/16,fd00::/8,127.0.0.0/8", 1 << 20).await;
    harness.resolver.answer("meta.test", &["169.254.169.254"]);
    harness.resolver.answer("meta6.test", &["fd00:ec2::254"]);
    harness.resolver.answer("ecs.test", &["169.254.170.2"]);
    for (name, address) in
        [("meta.test", "169.254.169.254"), ("meta6.test", "fd00:ec2::254"), ("ecs.test", "169.254.170.2")]
    {
        let error = harness.run(json!({ "url": format!("http://{name}/") })).await.expect_err("refused");
        assert_rejected(&error, address, "metadata");
    }
    assert!(harness.connector.connects().is_empty());
    harness.assert_no_violations();
}

#[tokio::test]
async fn an_allow_listed_private_address_connects_and_others_stay_blocked() {
    let harness = Harness::with("127.0.0.1/32", 1 << 20).await;
    harness.server.route("/ok", vec![trellis_testkit::http_server::Reply::json(200, &json!({"ok": true}))]);
    let outputs = harness.run(json!({"url": harness.url("/ok")})).await.expect("allowed");
    assert_eq!(outputs["body"], json!({"ok": true}));
    assert_eq!(harness.connector.connects(), vec![harness.server.addr()]);

    // Another loopback address is not covered by 127.0.0.1/32.
    harness.resolver.answer("other-loopback.test", &["127.0.0.2"]);
    let error = harness.run(json!({"url": "http://other-loopback.test/"})).await.expect_err("refused");
    assert_rejected(&error, "127.0.0.2", "loopback");
    assert_eq!(harness.connector.connects().len(), 1);
    harness.assert_no_violations();
}

#[tokio::test]
async fn a_rebinding_name_is_resolved_once_per_call_and_the_checked_address_is_connected() {
    let harness = Harness::new().await;
    harness.server.route("/", vec![trellis_testkit::http_server::Reply::json(200, &json!({"n": 1}))]);
    harness.resolver.answer_sequence("rebind.test", &[&["127.0.0.1"], &["169.254.169.254"]]);
    let url = format!("http://rebind.test:{}/", harness.server.port());

    let outputs = harness.run(json!({ "url": url })).await.expect("first answer allowed");
    assert_eq!(outputs["status"], 200);
    assert_eq!(harness.resolver.resolutions("rebind.test"), 1, "one resolution per call");
    assert_eq!(harness.connector.connects(), vec![harness.server.addr()], "exactly the checked address");

    let error = harness.run(json!({ "url": url })).await.expect_err("the rebound answer is refused");
    assert_rejected(&error, "169.254.169.254", "metadata");
    assert_eq!(harness.resolver.resolutions("rebind.test"), 2, "one resolution per call");
    assert_eq!(harness.connector.connects(), vec![harness.server.addr()], "nothing connected for the second call");
    assert_eq!(harness.server.requests().len(), 1);
    harness.assert_no_violations();
}

#[tokio::test]
async fn resolution_failures_are_retryable_network_errors() {
    let harness = Harness::new().await;
    harness.resolver.answer("empty.test", &[]);
    for name in ["unknown.test", "empty.test"] {
        let error = harness.run(json!({ "url": format!("http://{name}/") })).await.expect_err("no address");
        assert_eq!(error.code, "http_network_error", "{name}");
        assert!(error.retryable);
    }
    assert!(harness.connector.connects().is_empty());
    harness.assert_no_violations();
}
