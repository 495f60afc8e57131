//! A scriptable HTTP/1.1 server on 127.0.0.1 for outbound-HTTP tests: per path a queue of
//! responses (the last one repeats), a record of every request it saw, and how many requests
//! it was handling at once (now and at the peak, the scripted delays included).
//!
//! ```no_run
//! # async fn example() {
//! use trellis_testkit::http_server::{Reply, TestServer};
//! let server = TestServer::start().await;
//! server.route("/items", vec![Reply::json(200, &serde_json::json!({"ok": true}))]);
//! let url = server.url("/items?x=1");
//! // … call it …
//! assert_eq!(server.requests()[0].target, "/items?x=1");
//! # }
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One scripted response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers, in order (a name may repeat).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// How long to wait before answering (after the request was recorded).
    pub delay: Duration,
}

impl Reply {
    /// `status` with an empty body.
    pub fn status(status: u16) -> Self {
        Self { status, headers: Vec::new(), body: Vec::new(), delay: Duration::ZERO }
    }

    /// `status` with a JSON body.
    pub fn json(status: u16, body: &Value) -> Self {
        Self::status(status).header("content-type", "application/json").body(body.to_string().into_bytes())
    }

    /// `status` with a `text/plain` body.
    pub fn text(status: u16, body: &str) -> Self {
        Self::status(status).header("content-type", "text/plain; charset=utf-8").body(body.as_bytes().to_vec())
    }

    /// The same reply with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same reply with `body`.
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// The same reply, answered after `delay`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request the server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    /// The method.
    pub method: String,
    /// Path and query, as sent (`/items?x=1`).
    pub target: String,
    /// Headers, names lower-case, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// When its body had arrived (wall clock, for latency figures).
    pub received: std::time::SystemTime,
}

impl SeenRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(seen, _)| seen.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// The body parsed as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct State {
    routes: HashMap<String, Vec<Reply>>,
    served: HashMap<String, usize>,
    requests: Vec<SeenRequest>,
    /// Requests being handled now (from arrival until the response is handed back or the
    /// client hangs up).
    in_flight: usize,
    /// The most `in_flight` ever was.
    peak_in_flight: usize,
}

impl State {
    /// The next reply for `path`; unknown paths get a 404.
    fn next(&mut self, path: &str) -> Reply {
        let Some(replies) = self.routes.get(path).filter(|replies| !replies.is_empty()) else {
            return Reply::text(404, "no route scripted");
        };
        let served = self.served.entry(path.to_owned()).or_default();
        let reply = replies[(*served).min(replies.len() - 1)].clone();
        *served += 1;
        reply
    }
}

/// The server; stops (with every open connection) when dropped.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Starts a server on `127.0.0.1:0`.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Starts a server on `127.0.0.1:<port>` (a receiver back on the port it was down on).
    pub async fn start_on(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Self { addr, state, accept }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:<port><path_and_query>`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.addr)
    }

    /// Scripts `path` (without query): the replies in turn, the last one repeating.
    pub fn route(&self, path: &str, replies: Vec<Reply>) {
        let mut state = lock(&self.state);
        state.routes.insert(path.to_owned(), replies);
        state.served.remove(path);
    }

    /// Every request seen, in order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many requests are being handled right now, each counted from its arrival until
    /// its response is handed back (its [`Reply::delay`] included) or its client hangs up.
    pub fn in_flight(&self) -> usize {
        lock(&self.state).in_flight
    }

    /// The most requests ever handled at once (see [`TestServer::in_flight`]).
    pub fn peak_in_flight(&self) -> usize {
        lock(&self.state).peak_in_flight
    }

    /// The requests seen for `path` (without query).
    pub fn requests_to(&self, path: &str) -> Vec<SeenRequest> {
        lock(&self.state).requests.iter().filter(|request| request.path() == path).cloned().collect()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    serve(listener, move |request| handle(request, Arc::clone(&state))).await;
}

/// Serves HTTP/1.1 on `listener` until the task running it is aborted, each connection on a
/// task of its own (dropping the set aborts them all); `handle` answers every request. The
/// testkit's loopback servers (this one, the fake model provider) share it.
pub(crate) async fn serve<H, F, B, E>(listener: TcpListener, handle: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<Response<B>, E>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _peer)) = listener.accept().await else { continue };
        let handle = handle.clone();
        connections.spawn(async move {
            // A client that hangs up early (timeouts, capped bodies, scripted drops) is expected.
            let service = service_fn(handle);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// Counts one request in flight while it lives: dropped when the response is handed back, or
/// when hyper drops the handler because the client hung up mid-delay.
struct InFlight(Arc<Mutex<State>>);

impl InFlight {
    fn enter(state: &Arc<Mutex<State>>) -> Self {
        let mut locked = lock(state);
        locked.in_flight += 1;
        locked.peak_in_flight = locked.peak_in_flight.max(locked.in_flight);
        drop(locked);
        Self(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = lock(&self.0);
        state.in_flight = state.in_flight.saturating_sub(1);
    }
}

async fn handle(request: Request<Incoming>, state: Arc<Mutex<State>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let _in_flight = InFlight::enter(&state);
    let method = request.method().as_str().to_owned();
    let target = request.uri().path_and_query().map_or_else(|| request.uri().path().to_owned(), |pq| pq.to_string());
    let headers = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let body = request.into_body().collect().await.map(|body| body.to_bytes().to_vec()).unwrap_or_default();
    let seen = SeenRequest { method, target, headers, body, received: std::time::SystemTime::now() };
    let reply = {
        let mut state = lock(&state);
        let reply = state.next(seen.path());
        state.requests.push(seen);
        reply
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(name, value);
    }
    Ok(response.body(Full::new(Bytes::from(reply.body))).unwrap_or_else(|_| {
        let mut fallback = Response::new(Full::new(Bytes::from_static(b"bad scripted reply")));
        *fallback.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        fallback
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three requests held by a delay are in flight together; once answered, none is.
    #[tokio::test]
    async fn the_in_flight_count_covers_the_delay_and_drops_after_the_answer() {
        let server = TestServer::start().await;
        server.route("/slow", vec![Reply::text(200, "late").delay(Duration::from_secs(2))]);
        assert_eq!((server.in_flight(), server.peak_in_flight()), (0, 0));
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let calls = (0..3).map(|n| {
            let (client, url) = (client.clone(), server.url(&format!("/slow?n={n}")));
            tokio::spawn(async move { client.get(url).send().await.expect("answered").status().as_u16() })
        });
        let calls: Vec<_> = calls.collect();
        // All three arrive before any is answered (each waits 2 s after its arrival).
        while server.requests().len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(server.in_flight(), 3, "three requests inside their delay");
        for call in calls {
            assert_eq!(call.await.expect("joined"), 200);
        }
        assert_eq!((server.in_flight(), server.peak_in_flight()), (0, 3));
    }

    /// A client that hangs up mid-delay no longer counts.
    #[tokio::test]
    async fn a_client_hanging_up_leaves_the_in_flight_count() {
        let server = TestServer::start().await;
        server.route("/slow", vec![Reply::status(200).delay(Duration::from_secs(30))]);
        let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_millis(200)).build().expect("client");
        assert!(client.get(server.url("/slow")).send().await.is_err(), "the client gives up first");
        let mut waited = 0;
        while server.in_flight() > 0 && waited < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
        }
        assert_eq!((server.in_flight(), server.peak_in_flight()), (0, 1));
    }
}
