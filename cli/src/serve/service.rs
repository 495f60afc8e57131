//! [`ConnService`]: the hyper service of one connection. It answers refused heads from the
//! pre-parser's queue, hands the rest to the axum router, turns a body-read timeout into
//! `408`, writes the access log line, and keeps the connection's in-flight count (a response
//! counts until hyper drops its body, so a streaming answer is never idle).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::MatchedPath;
use axum::http::{header, HeaderValue, Request, Response};
use axum::Router;
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::info;

use super::head::Rejection;
use super::io::SharedState;

/// The service of one connection.
#[derive(Clone)]
pub(crate) struct ConnService {
    pub(crate) router: Router,
    pub(crate) shared: SharedState,
    pub(crate) body_timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let verdict = self.shared.lock().verdicts.pop_front().flatten();
        let guard = InFlight(self.shared.clone());
        let router = self.router.clone();
        let shared = self.shared.clone();
        let body_timeout = self.body_timeout;
        Box::pin(async move {
            let started = Instant::now();
            let response = match verdict {
                Some(rejection) => {
                    info!(status = rejection.status.as_u16(), error = rejection.code, "request refused before routing");
                    refusal(&rejection)
                }
                None => {
                    let method = request.method().clone();
                    let response = match router.oneshot(request.map(Body::new)).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    };
                    let response = if shared.lock().body_timed_out {
                        refusal(&Rejection::timeout("body", body_timeout))
                    } else {
                        response
                    };
                    let route = response.extensions().get::<MatchedPath>().map_or("-", MatchedPath::as_str);
                    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
                    info!(%method, route = %route, status = response.status().as_u16(), latency_ms, "request");
                    response
                }
            };
            Ok(response.map(|body| Tracked { body, _guard: guard }))
        })
    }
}

/// The envelope answer of a refusal; the connection closes after it.
pub(crate) fn refusal(rejection: &Rejection) -> Response<Body> {
    let mut response = Response::new(Body::from(rejection.body()));
    *response.status_mut() = rejection.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Counts a request as in flight until its response body is dropped.
struct InFlight(SharedState);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.response_done();
    }
}

/// A response body that keeps its request in flight while it exists.
pub(crate) struct Tracked {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
