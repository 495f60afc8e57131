//! A fake of the Lambda Invoke API on 127.0.0.1 (`POST /2015-03-31/functions/{name}/invocations`,
//! request/response), for `vendor.trellis.aws.lambdaInvoke`: point the AWS SDK at it with
//! `AWS_ENDPOINT_URL_LAMBDA=`[`FakeLambda::endpoint_url`] (moto's Lambda needs Docker; nothing
//! here leaves loopback).
//!
//! Each function is scripted by name: [`FakeLambda::answer`] (200 and a payload),
//! [`FakeLambda::function_error`] (200 with `X-Amz-Function-Error: Unhandled` and the
//! runtime's `{errorType, errorMessage}` payload), [`FakeLambda::throttle_then`] (429
//! `TooManyRequestsException` as the service sends it, `times` times, then an answer). A
//! function that is not scripted answers 404 `ResourceNotFoundException`. Every invocation is
//! recorded ([`FakeLambda::invocations`]): its payload and its decoded client context.

use base64::Engine as _;
use serde_json::{json, Value};

use crate::http_server::{Reply, SeenRequest, TestServer};

/// The fake.
pub struct FakeLambda {
    server: TestServer,
}

fn path(function: &str) -> String {
    format!("/2015-03-31/functions/{function}/invocations")
}

fn payload(status: u16, body: &Value) -> Reply {
    Reply::json(status, body).header("x-amz-executed-version", "$LATEST")
}

fn exception(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, &json!({ "Type": "User", "message": message }))
        .header("x-amzn-errortype", &format!("{kind}:http://internal.amazon.com/coral/com.amazonaws.awslambda/"))
}

impl FakeLambda {
    /// Starts the fake on an ephemeral loopback port.
    pub async fn start() -> Self {
        let server = TestServer::start().await;
        Self { server }
    }

    /// The endpoint to configure (`AWS_ENDPOINT_URL_LAMBDA`).
    pub fn endpoint_url(&self) -> String {
        self.server.url("")
    }

    /// `function` answers `body`.
    pub fn answer(&self, function: &str, body: &Value) {
        self.server.route(&path(function), vec![payload(200, body)]);
    }

    /// `function` runs and fails with `error_type` and `message` (an unhandled error).
    pub fn function_error(&self, function: &str, error_type: &str, message: &str) {
        let failed = Reply::json(200, &json!({ "errorType": error_type, "errorMessage": message, "trace": [] }))
            .header("x-amz-function-error", "Unhandled")
            .header("x-amz-executed-version", "$LATEST");
        self.server.route(&path(function), vec![failed]);
    }

    /// `function` is throttled `times` times, then answers `body`.
    pub fn throttle_then(&self, function: &str, times: usize, body: &Value) {
        let mut replies = vec![exception(429, "TooManyRequestsException", "Rate Exceeded."); times];
        replies.push(payload(200, body));
        self.server.route(&path(function), replies);
    }

    /// The invocations of `function`, in order.
    pub fn invocations(&self, function: &str) -> Vec<Invocation> {
        let path = path(function);
        self.server.requests().into_iter().filter(|request| request.path() == path).map(Invocation::of).collect()
    }
}

/// One recorded invocation.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The request as seen.
    pub request: SeenRequest,
    /// Its payload.
    pub payload: Value,
    /// Its client context (`X-Amz-Client-Context`, decoded), `Null` without one.
    pub client_context: Value,
}

impl Invocation {
    fn of(request: SeenRequest) -> Self {
        let client_context = request
            .header("x-amz-client-context")
            .and_then(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null);
        Self { payload: request.json(), client_context, request }
    }

    /// Whether the request was signed (SigV4), as the service requires.
    pub fn signed(&self) -> bool {
        self.request.header("authorization").is_some_and(|value| value.starts_with("AWS4-HMAC-SHA256 Credential="))
    }
}
