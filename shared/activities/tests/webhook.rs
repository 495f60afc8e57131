//! The webhook transport's SSRF gates with a scripted resolver and a connector that refuses
//! and records any non-loopback connect: registration refuses by the literal URL and by every
//! address a name resolves to; a name that does not resolve passes registration and is
//! checked at delivery; a name rebinding to a private address after registration is refused at
//! delivery with nothing connected; `http` needs an allow-listed destination; an allow-listed
//! loopback receiver gets the POST. Nothing leaves 127.0.0.1.

use std::sync::Arc;

use trellis_activities::http::{AllowList, HttpClient, HttpSettings};
use trellis_activities::webhook::HttpWebhookTransport;
use trellis_core::interrupt::callback::CallbackSender;
use trellis_core::webhook::WebhookTransport;
use trellis_testkit::http_server::{Reply, TestServer};
use trellis_testkit::net::{RecordingConnector, ScriptedResolver};

fn transport(allow: &str, resolver: Arc<ScriptedResolver>) -> (HttpWebhookTransport, Arc<RecordingConnector>) {
    let connector = Arc::new(RecordingConnector::new());
    let settings = HttpSettings { allow: AllowList::parse(allow).unwrap(), ..HttpSettings::default() };
    (HttpWebhookTransport::new(HttpClient::new(settings, resolver, connector.clone())), connector)
}

#[tokio::test]
async fn registration_checks_the_literal_url_and_every_resolved_address() {
    let resolver = Arc::new(ScriptedResolver::new());
    resolver.answer("public.example", &["93.184.216.34"]);
    resolver.answer("mixed.example", &["93.184.216.34", "10.0.0.7"]);
    resolver.answer("loopback.example", &["127.0.0.1"]);
    resolver.answer("linklocal.example", &["169.254.10.10"]);
    resolver.answer("ula.example", &["fd12::1"]);
    resolver.answer("metadata.example", &["169.254.169.254"]);
    resolver.answer("localhost", &["127.0.0.1"]);
    let (transport, connector) = transport("", resolver.clone());
    assert_eq!(transport.check_destination("https://public.example/hook").await, Ok(()));
    for (url, reason) in [
        ("https://mixed.example/hook", "private"),
        ("https://loopback.example/hook", "loopback"),
        ("https://linklocal.example/hook", "link-local"),
        ("https://ula.example/hook", "unique-local"),
        ("https://metadata.example/hook", "metadata"),
        ("https://10.1.2.3/hook", "private"),
        ("https://localhost/hook", "localhost"),
        ("https://metadata.google.internal/", "metadata"),
        ("http://public.example/hook", "https"),
        ("https://user:pw@public.example/", "credentials"),
    ] {
        let refused = transport.check_destination(url).await.expect_err(url);
        assert!(refused.contains(reason), "{url}: {refused}");
    }
    // Unresolvable: accepted now, checked again at every delivery.
    assert_eq!(transport.check_destination("https://nowhere.example/hook").await, Ok(()));
    assert!(connector.connects().is_empty(), "a registration check connects nowhere");
}

#[tokio::test]
async fn a_name_rebinding_after_registration_is_refused_at_delivery_without_a_connect() {
    let resolver = Arc::new(ScriptedResolver::new());
    resolver.answer_sequence("rebind.example", &[&["93.184.216.34"], &["10.0.0.9"]]);
    let (transport, connector) = transport("", resolver.clone());
    assert_eq!(transport.check_destination("https://rebind.example/hook").await, Ok(()));
    let refused = transport.post("https://rebind.example/hook", &[], b"{}".to_vec(), 1_000).await.unwrap_err();
    assert_eq!(refused.code, "webhook_url_rejected");
    assert!(!refused.retryable, "a refused destination is not retried");
    assert!(connector.connects().is_empty(), "{:?}", connector.connects());
    assert!(connector.violations().is_empty());
}

#[tokio::test]
async fn an_allow_listed_loopback_receiver_gets_the_post_over_http() {
    let server = TestServer::start().await;
    server.route("/hook", vec![Reply::status(200)]);
    let resolver = Arc::new(ScriptedResolver::new());
    resolver.answer("receiver.test", &["127.0.0.1"]);
    let (transport, connector) = transport("127.0.0.1/32", resolver);
    let url = format!("http://receiver.test:{}/hook", server.port());
    assert_eq!(transport.check_destination(&url).await, Ok(()));
    let headers = [("content-type", "application/json".to_owned())];
    transport.post(&url, &headers, b"{\"a\":1}".to_vec(), 2_000).await.expect("delivered");
    assert_eq!(server.requests_to("/hook").len(), 1);
    assert!(connector.violations().is_empty());
    // Allow-listing loopback lifts neither other private nets nor https for them.
    let (strict, _) = transport_with_public();
    assert!(strict.check_destination("http://10.0.0.1/").await.is_err());
}

fn transport_with_public() -> (HttpWebhookTransport, Arc<RecordingConnector>) {
    transport("127.0.0.1/32", Arc::new(ScriptedResolver::new()))
}

#[tokio::test]
async fn answers_other_than_2xx_fail_and_only_transient_ones_retry() {
    let server = TestServer::start().await;
    server.route("/busy", vec![Reply::status(503)]);
    server.route("/moved", vec![Reply::status(302).header("location", "http://10.0.0.1/")]);
    server.route("/bad", vec![Reply::status(400)]);
    let (transport, connector) = transport("127.0.0.1/32", Arc::new(ScriptedResolver::new()));
    let post = |path: &str| {
        let url = server.url(path);
        let transport = transport.clone();
        async move { transport.post(&url, &[], Vec::new(), 2_000).await.unwrap_err() }
    };
    assert!(post("/busy").await.retryable);
    let moved = post("/moved").await;
    assert!(!moved.retryable, "a redirect is a failed delivery, never followed");
    assert!(!post("/bad").await.retryable);
    assert!(connector.violations().is_empty(), "the redirect was not followed");
    assert_eq!(server.requests().len(), 3);
}
