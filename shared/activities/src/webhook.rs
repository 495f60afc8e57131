//! The outbound side of webhooks ([`HttpWebhookTransport`]): the destination check at
//! registration and every delivery POST, through the one SSRF-guarded client. `https` only,
//! unless every address of the destination is in the operator's allow-listed private nets
//! (`--http-allow-private-nets` / `TRELLIS_HTTP_ALLOW_PRIVATE_NETS`), which relaxes the
//! scheme and the address gates for those nets only — at registration, and again at each
//! delivery, where the client resolves, checks, pins and follows no redirect (a 3xx is a
//! failed delivery).

use async_trait::async_trait;
use trellis_core::interrupt::callback::{CallbackError, CallbackSender};
use trellis_core::webhook::WebhookTransport;

use crate::callback::HttpCallbackSender;
use crate::http::HttpClient;

/// Webhook deliveries through an [`HttpClient`].
#[derive(Debug, Clone)]
pub struct HttpWebhookTransport {
    client: HttpClient,
    sender: HttpCallbackSender,
}

impl HttpWebhookTransport {
    /// A transport over `client` (the host's outbound client, with its address policy).
    pub fn new(client: HttpClient) -> Self {
        Self { sender: HttpCallbackSender::new(client.clone()), client }
    }
}

#[async_trait]
impl WebhookTransport for HttpWebhookTransport {
    async fn check_destination(&self, url: &str) -> Result<(), String> {
        self.client.check_destination(url, true).await
    }
}

#[async_trait]
impl CallbackSender for HttpWebhookTransport {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<(), CallbackError> {
        if let Err(reason) = self.client.check_destination(url, true).await {
            return Err(CallbackError {
                code: "webhook_url_rejected".into(),
                message: format!("the webhook url is not allowed: {reason}"),
                retryable: false,
            });
        }
        self.sender.post(url, headers, body, timeout_ms).await
    }
}
