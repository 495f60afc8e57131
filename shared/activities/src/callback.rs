//! The sender of callback notifies ([`CallbackSender`]): a POST through the one SSRF-guarded
//! client ([`HttpClient`]: resolve, check every address, pin, connect; no redirects), so a
//! run's `callbackUrl` or a node's `settings.notifyUrl` can reach only what `core.http.request`
//! could. A 2xx answer is success; a 408, 425, 429 or 5xx answer, a timeout and a network
//! error are worth another try; any other answer (and a refused address) is not.

use std::time::Duration;

use async_trait::async_trait;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Method;
use trellis_core::interrupt::callback::{CallbackError, CallbackSender};

use crate::http::{HttpClient, OutboundRequest};

/// Sends callback notifies through an [`HttpClient`].
#[derive(Debug, Clone)]
pub struct HttpCallbackSender {
    client: HttpClient,
}

impl HttpCallbackSender {
    /// A sender over `client` (the host's outbound client, with its address policy).
    pub fn new(client: HttpClient) -> Self {
        Self { client }
    }
}

fn error(code: &str, message: impl Into<String>, retryable: bool) -> CallbackError {
    CallbackError { code: code.to_owned(), message: message.into(), retryable }
}

#[async_trait]
impl CallbackSender for HttpCallbackSender {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<(), CallbackError> {
        let mut pairs = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|_| error("validation_error", "bad header", false))?;
            pairs.push((HeaderName::from_static(name), value));
        }
        let request = OutboundRequest {
            method: Method::POST,
            url: url.to_owned(),
            headers: pairs,
            body: Bytes::from(body),
            timeout: Duration::from_millis(timeout_ms),
        };
        match self.client.send(request).await {
            Ok(response) if (200..300).contains(&response.status) => Ok(()),
            Ok(response) => {
                let retryable = matches!(response.status, 408 | 425 | 429) || response.status >= 500;
                Err(error("callback_status", format!("the worker answered {}", response.status), retryable))
            }
            Err(failure) => Err(error(failure.code(), failure.to_string(), failure.retryable())),
        }
    }
}
