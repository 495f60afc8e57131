//! The connection layer of the embedded host against a real listener, over raw TCP: read
//! timeouts (shortened through `HostOptions::connections`), the connection limit, and the
//! pre-parser that answers malformed request heads with the error envelope.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{serve_args, start_with, KEY};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trellis::host::{EmbeddedHost, HostOptions};
use trellis::serve::ConnectionSettings;
use trellis_http::StreamSettings;

/// How long a test waits for anything before it fails (a hang guard, not a measurement).
const GUARD: Duration = Duration::from_secs(5);
/// The shortened timeouts of these tests.
const SHORT: Duration = Duration::from_millis(300);

fn short_settings() -> ConnectionSettings {
    ConnectionSettings { max_connections: 64, header_timeout: SHORT, body_timeout: SHORT, idle_timeout: SHORT }
}

async fn host(connections: ConnectionSettings) -> EmbeddedHost {
    let streams = StreamSettings { keepalive: Duration::from_millis(100), max_duration: None };
    let options = HostOptions { api_key: Some(KEY.to_owned()), connections, streams, ..HostOptions::default() };
    start_with(serve_args(None), options).await
}

/// One answer read off the wire.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = String::from_utf8_lossy(&self.body);
        let shown: String = body.chars().take(300).collect();
        write!(f, "{} {:?} {shown:?}", self.status, self.headers)
    }
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("body is not JSON ({error}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts the canonical envelope with `Content-Type: application/json` and
    /// `Connection: close`; returns the body.
    fn assert_envelope(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.header("content-type"), Some("application/json"), "{self:?}");
        assert_eq!(self.header("connection"), Some("close"), "{self:?}");
        let body = self.json();
        assert_eq!(body["error"], code, "{body}");
        assert!(body["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
        body
    }
}

/// A raw client connection that keeps unread bytes between answers.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl Conn {
    async fn open(host: &EmbeddedHost) -> Self {
        Self { stream: TcpStream::connect(host.addr).await.expect("connects"), buf: Vec::new(), eof: false }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("request written");
    }

    /// Reads more bytes; false at end of stream (or a reset, which is the same to a client).
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let read = tokio::time::timeout(GUARD, self.stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("nothing read within {GUARD:?}; the server still holds the connection"));
        match read {
            Ok(0) | Err(_) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next answer; `None` when the connection closes before one starts.
    async fn answer(&mut self) -> Option<Answer> {
        let (status, headers, head_len) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(len) = response.parse(&self.buf).expect("a well-formed response head") {
                let headers = response
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect::<Vec<_>>();
                break (response.code.unwrap(), headers, len);
            }
            if !self.fill().await {
                assert!(self.buf.is_empty(), "connection closed mid-answer: {:?}", String::from_utf8_lossy(&self.buf));
                return None;
            }
        };
        self.buf.drain(..head_len);
        let mut answer = Answer { status, headers, body: Vec::new() };
        if let Some(length) = answer.header("content-length").map(|v| v.parse::<usize>().unwrap()) {
            while self.buf.len() < length {
                assert!(self.fill().await, "connection closed inside a body");
            }
            answer.body = self.buf.drain(..length).collect();
        } else if answer.header("transfer-encoding") == Some("chunked") {
            answer.body = self.chunked_body().await;
        } else {
            while self.fill().await {}
            answer.body = std::mem::take(&mut self.buf);
        }
        Some(answer)
    }

    async fn chunked_body(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let (used, size) = loop {
                if let Ok(httparse::Status::Complete(found)) = httparse::parse_chunk_size(&self.buf) {
                    break found;
                }
                assert!(self.fill().await, "connection closed inside a chunked body");
            };
            let size = usize::try_from(size).unwrap();
            while self.buf.len() < used + size + 2 {
                assert!(self.fill().await, "connection closed inside a chunk");
            }
            body.extend_from_slice(&self.buf[used..used + size]);
            self.buf.drain(..used + size + 2);
            if size == 0 {
                return body;
            }
        }
    }

    /// True when the server closes the connection (within [`GUARD`]) without sending anything.
    async fn closed_silently(&mut self) -> bool {
        while self.fill().await {}
        self.buf.is_empty()
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\n\r\n")
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `request` on a fresh connection and returns the answer.
async fn one_shot(host: &EmbeddedHost, request: &[u8]) -> Answer {
    let mut conn = Conn::open(host).await;
    conn.send(request).await;
    conn.answer().await.expect("an answer before the connection closes")
}

// ---- item 11: timeouts and the connection limit -------------------------------------------

#[tokio::test]
async fn a_partial_head_is_answered_408_and_closed_after_the_header_timeout() {
    let host = host(short_settings()).await;
    let mut conn = Conn::open(&host).await;
    conn.send(b"GET /.well-known/openwop HTTP/1.1\r\nHost: localhost\r\n").await;
    let answer = conn.answer().await.expect("a 408 before the close");
    answer.assert_envelope(408, "request_timeout");
    assert!(conn.closed_silently().await, "closed after the 408");
    host.stop().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let host = host(short_settings()).await;
    let mut conn = Conn::open(&host).await;
    assert!(conn.closed_silently().await, "closed without an answer");
    host.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let host = host(short_settings()).await;
    let mut conn = Conn::open(&host).await;
    conn.send(get("/.well-known/openwop").as_bytes()).await;
    assert_eq!(conn.answer().await.expect("discovery").status, 200);
    assert!(conn.closed_silently().await, "the idle connection is closed");
    host.stop().await;
}

#[tokio::test]
async fn a_body_that_never_arrives_is_cut_off_after_the_body_timeout() {
    let host = host(short_settings()).await;
    let mut conn = Conn::open(&host).await;
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"workflowId\""
    );
    conn.send(head.as_bytes()).await;
    let answer = conn.answer().await.expect("a 408 before the close");
    answer.assert_envelope(408, "request_timeout");
    assert!(conn.closed_silently().await, "closed after the 408");
    host.stop().await;
}

/// A client of `host` and a run of it parked in a minute-long delay (cancel it when done).
async fn parked_run(host: &EmbeddedHost) -> (common::Client, String) {
    let client = common::Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    (client, run_id)
}

/// Opens an SSE stream on a run parked in a long delay and reads it for several idle
/// timeouts: keep-alive comments keep arriving, the connection stays open.
#[tokio::test]
async fn an_sse_stream_is_not_idle() {
    let host = host(short_settings()).await;
    let (client, run_id) = parked_run(&host).await;
    let mut conn = Conn::open(&host).await;
    let request = format!(
        "GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\nAccept: text/event-stream\r\n\r\n"
    );
    conn.send(request.as_bytes()).await;
    let opened = Instant::now();
    let mut keepalives_after_idle = 0;
    while opened.elapsed() < SHORT * 4 {
        let before = conn.buf.len();
        assert!(conn.fill().await, "the SSE stream was closed after {:?}", opened.elapsed());
        let text = String::from_utf8_lossy(&conn.buf[before..]).into_owned();
        if opened.elapsed() > SHORT * 2 && text.contains(":keepalive") {
            keepalives_after_idle += 1;
        }
    }
    assert!(String::from_utf8_lossy(&conn.buf).contains("run.started"), "the backlog was streamed");
    assert!(keepalives_after_idle > 0, "keep-alive frames still arrive after twice the idle timeout");
    client.request("POST", &format!("/v1/runs/{run_id}/cancel"), Some(json!({}))).await;
    host.stop().await;
}

#[tokio::test]
async fn a_long_poll_is_not_idle() {
    let host = host(short_settings()).await;
    let (client, run_id) = parked_run(&host).await;
    // Wait until the delay node is parked: nothing more happens for a minute.
    let started = Instant::now();
    while !common::types(&client.events(&run_id).await).contains(&"node.started".to_owned()) {
        assert!(started.elapsed() < GUARD, "the delay node never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, first) = client.request("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), None).await;
    let cursor = format!("&lastSequence={}", first["lastEventSeq"]);
    let mut conn = Conn::open(&host).await;
    // A one-second long-poll, several idle timeouts long.
    conn.send(get(&format!("/v1/runs/{run_id}/events/poll?timeout=1{cursor}")).as_bytes()).await;
    let answer = conn.answer().await.expect("the poll answers");
    assert_eq!(answer.status, 200, "{:?}", String::from_utf8_lossy(&answer.body));
    client.request("POST", &format!("/v1/runs/{run_id}/cancel"), Some(json!({}))).await;
    host.stop().await;
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_connection_over_the_limit_is_refused_with_a_503_envelope_and_a_warning() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    // The test runtime is single-threaded, so every task of the host logs here.
    let _guard = tracing::subscriber::set_default(subscriber);
    let host = host(ConnectionSettings { max_connections: 2, ..ConnectionSettings::default() }).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = Conn::open(&host).await;
        conn.send(get("/.well-known/openwop").as_bytes()).await;
        assert_eq!(conn.answer().await.expect("served").status, 200);
        held.push(conn);
    }
    let refused = one_shot(&host, get("/.well-known/openwop").as_bytes()).await;
    let body = refused.assert_envelope(503, "service_unavailable");
    assert_eq!(body["details"]["retriable"], true, "{body}");
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> =
        text.lines().filter(|line| line.contains("WARN") && line.contains("connection")).collect();
    assert_eq!(warnings.len(), 1, "one warning per refused connection: {text}");
    assert!(warnings[0].contains("max_connections=2"), "{}", warnings[0]);
    // Closing one frees its slot.
    drop(held.pop());
    let started = Instant::now();
    loop {
        let answer = one_shot(&host, get("/.well-known/openwop").as_bytes()).await;
        if answer.status == 200 {
            break;
        }
        assert!(started.elapsed() < GUARD, "the freed slot was never reused: {answer:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.stop().await;
}

// ---- item 12: what hyper would refuse before routing gets the envelope ---------------------

#[tokio::test]
async fn a_request_target_too_long_is_a_414_envelope() {
    let host = host(ConnectionSettings::default()).await;
    let request = format!("GET /{} HTTP/1.1\r\nHost: localhost\r\n\r\n", "a".repeat(70_000));
    one_shot(&host, request.as_bytes()).await.assert_envelope(414, "uri_too_long");
    host.stop().await;
}

#[tokio::test]
async fn too_many_or_too_large_headers_are_a_431_envelope() {
    let host = host(ConnectionSettings::default()).await;
    let many: String = (0..101).map(|i| format!("X-H{i}: v\r\n")).collect();
    let request = format!("GET /.well-known/openwop HTTP/1.1\r\nHost: localhost\r\n{many}\r\n");
    one_shot(&host, request.as_bytes()).await.assert_envelope(431, "headers_too_large");
    let request =
        format!("GET /.well-known/openwop HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n", "b".repeat(500_000));
    one_shot(&host, request.as_bytes()).await.assert_envelope(431, "headers_too_large");
    host.stop().await;
}

#[tokio::test]
async fn a_malformed_request_line_is_a_400_envelope() {
    let host = host(ConnectionSettings::default()).await;
    for (request, part) in [
        (&b"HELLO\r\n\r\n"[..], "request-line"),
        (b"GET / HTTP/9.9\r\n\r\n", "request-line"),
        (b"G(T / HTTP/1.1\r\n\r\n", "request-line"),
        (b"GET  HTTP/1.1\r\n\r\n", "request-target"),
    ] {
        let body = one_shot(&host, request).await.assert_envelope(400, "validation_error");
        assert_eq!(body["details"]["part"], part, "{body} for {:?}", String::from_utf8_lossy(request));
    }
    host.stop().await;
}

#[tokio::test]
async fn a_malformed_header_is_a_400_envelope() {
    let host = host(ConnectionSettings::default()).await;
    for request in [
        &b"GET / HTTP/1.1\r\nHost: localhost\r\nX-A: a\0b\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: localhost\r\nX A: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost\r\nno colon\r\n\r\n",
    ] {
        let body = one_shot(&host, request).await.assert_envelope(400, "validation_error");
        assert_eq!(body["details"]["part"], "header", "{body} for {:?}", String::from_utf8_lossy(request));
    }
    host.stop().await;
}

#[tokio::test]
async fn invalid_utf8_in_the_path_or_query_is_a_400_envelope() {
    let host = host(ConnectionSettings::default()).await;
    for request in [
        &b"GET /v1/runs/\xff\xfe HTTP/1.1\r\nHost: localhost\r\n\r\n"[..],
        b"GET /v1/runs?limit=\xc3 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ] {
        let body = one_shot(&host, request).await.assert_envelope(400, "validation_error");
        assert_eq!(body["details"]["part"], "request-target", "{body}");
    }
    host.stop().await;
}

#[tokio::test]
async fn two_different_content_lengths_are_a_400_envelope() {
    let host = host(ConnectionSettings::default()).await;
    let request = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}"
    );
    let body = one_shot(&host, request.as_bytes()).await.assert_envelope(400, "validation_error");
    assert_eq!(body["details"]["header"], "content-length", "{body}");
    host.stop().await;
}

// ---- well-formed traffic still flows through the pre-parser --------------------------------

#[tokio::test]
async fn pipelined_requests_a_post_body_and_a_chunked_body_are_served_on_one_connection() {
    let host = host(ConnectionSettings::default()).await;
    let mut conn = Conn::open(&host).await;
    let two = format!("{}{}", get("/.well-known/openwop"), get("/v1/runs?limit=1"));
    conn.send(two.as_bytes()).await;
    assert_eq!(conn.answer().await.unwrap().status, 200);
    assert_eq!(conn.answer().await.unwrap().status, 200);

    conn.send(post("/v1/runs", r#"{"workflowId": "conformance-noop"}"#).as_bytes()).await;
    let created = conn.answer().await.unwrap();
    assert_eq!(created.status, 201, "{:?}", created.json());

    let chunked = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"wor\r\n1d;ext=1\r\nkflowId\": \"conformance-noop\"}}\r\n0\r\nX-Trailer: t\r\n\r\n"
    );
    conn.send(chunked.as_bytes()).await;
    let created = conn.answer().await.unwrap();
    assert_eq!(created.status, 201, "{:?}", created.json());

    // A bad head after good ones on the same connection still gets the envelope.
    conn.send(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-A: a\0b\r\n\r\n").await;
    conn.answer().await.unwrap().assert_envelope(400, "validation_error");
    assert!(conn.closed_silently().await, "closed after the refusal");
    host.stop().await;
}
