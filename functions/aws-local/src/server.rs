//! The HTTP front of the local stack, as API Gateway's REST API on one stage: a request
//! under `/{stage}/…` becomes a proxy event ([`trellis_aws::local::event`]) handed to the
//! `api` function's router, whose response is streamed back as it is produced (Server-Sent
//! Events arrive live); a request outside the stage gets a 403, as API Gateway's `Missing
//! Authentication Token`. Connections are HTTP/1.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;
use tracing::{debug, warn};
use trellis_aws::local::event::{proxy_request, IncomingRequest};

/// API Gateway's largest request payload (10 MB).
const MAX_REQUEST_BYTES: usize = 10 * 1024 * 1024;
/// How long open connections (a live SSE stream, a long poll) get to end after a stop
/// before they are closed; clients resume with `Last-Event-ID` or a new poll.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The stage and the router requests under it go to.
pub(crate) struct Gateway {
    pub(crate) router: axum::Router,
    pub(crate) stage: String,
}

fn envelope(status: StatusCode, code: &str, message: String) -> Response<Body> {
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

impl Gateway {
    /// Answers one request.
    async fn handle(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let prefix = format!("/{}/", self.stage);
        let Some(below) = request.uri().path().strip_prefix(&prefix).filter(|rest| !rest.is_empty()) else {
            let message = format!(
                "no resource at {}: the API is served under its stage, use /{}/… (e.g. /{}/v1/runs)",
                request.uri().path(),
                self.stage,
                self.stage
            );
            let mut response = envelope(StatusCode::FORBIDDEN, "forbidden", message);
            response.headers_mut().insert(
                "x-amzn-errortype",
                hyper::header::HeaderValue::from_static("MissingAuthenticationTokenException"),
            );
            return response;
        };
        let path = format!("/{below}");
        let query = request.uri().query().unwrap_or("").to_owned();
        let method = request.method().as_str().to_owned();
        let (mut parts, body) = request.into_parts();
        let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                let message = format!("the request body is larger than API Gateway's {MAX_REQUEST_BYTES} bytes");
                return envelope(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message);
            }
            Err(error) => {
                debug!(%error, "request body not read");
                return envelope(StatusCode::BAD_REQUEST, "bad_request", "the request body could not be read".into());
            }
        };
        let headers = &mut parts.headers;
        // What API Gateway adds in front of the function.
        headers.entry("x-forwarded-for").or_insert_with(|| header_value(&peer.ip().to_string()));
        headers.entry("x-forwarded-proto").or_insert_with(|| header_value("http"));
        headers.entry("x-forwarded-port").or_insert_with(|| header_value(&peer.port().to_string()));
        let source_ip = peer.ip().to_string();
        let incoming = IncomingRequest {
            method: &method,
            path: &path,
            query: &query,
            headers,
            body: &body,
            stage: &self.stage,
            stage_in_path: true,
            source_ip: &source_ip,
        };
        let event = match proxy_request(&incoming) {
            Ok(event) => event,
            Err(error) => {
                warn!(%error, "request not turned into a proxy event");
                return envelope(StatusCode::BAD_REQUEST, "bad_request", error.to_string());
            }
        };
        let (parts, body) = event.into_parts();
        let request = Request::from_parts(parts, Body::from(body.to_vec()));
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

fn header_value(text: &str) -> hyper::header::HeaderValue {
    hyper::header::HeaderValue::from_str(text).unwrap_or_else(|_| hyper::header::HeaderValue::from_static(""))
}

/// Serves `listener` until `shutdown` turns true, then gives open connections
/// [`SHUTDOWN_GRACE`] to finish and closes the rest.
pub(crate) async fn serve(listener: TcpListener, gateway: Arc<Gateway>, mut shutdown: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let gateway = gateway.clone();
        let mut stop = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let gateway = gateway.clone();
                async move { Ok::<_, Infallible>(gateway.handle(request, peer).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        connections.abort_all();
    }
}
