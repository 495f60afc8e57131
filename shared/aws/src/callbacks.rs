//! How the dispatcher notifies external workers on AWS (`docs/callbacks.md`): a POST through
//! `core.http.request`'s client ([`HttpCallbackSender`]), or — when the target is an SQS queue
//! ARN (`settings.notifyUrl` or the run's `callbackUrl`) — a message on that queue whose body
//! is the notify's JSON (the signed token, the task payload, the links) and whose attributes
//! are `idempotency-key` (the occurrence id) and `trellis-attempt`. A worker polling the queue
//! resolves the interrupt with the token as it would after a POST. The queue's URL is asked of
//! SQS once per queue (`GetQueueUrl`, also naming the owner account) and cached.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageAttributeValue;
use trellis_activities::callback::HttpCallbackSender;
use trellis_core::interrupt::callback::{is_queue_target, CallbackError, CallbackSender};

/// Sends notifies by POST or to SQS queues.
#[derive(Debug)]
pub struct AwsCallbackSender {
    http: HttpCallbackSender,
    sqs: aws_sdk_sqs::Client,
    queue_urls: Mutex<HashMap<String, String>>,
}

impl AwsCallbackSender {
    /// A sender posting through `http` and sending through `sqs`.
    pub fn new(http: HttpCallbackSender, sqs: aws_sdk_sqs::Client) -> Self {
        Self { http, sqs, queue_urls: Mutex::new(HashMap::new()) }
    }

    async fn queue_url(&self, arn: &str) -> Result<String, CallbackError> {
        if let Some(url) = self.queue_urls.lock().expect("queue url cache").get(arn) {
            return Ok(url.clone());
        }
        let parts: Vec<&str> = arn.split(':').collect();
        let (account, name) = (parts[4], parts[5]);
        let found = self
            .sqs
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|error| failure(&error))?;
        let url = found.queue_url().unwrap_or_default().to_owned();
        self.queue_urls.lock().expect("queue url cache").insert(arn.to_owned(), url.clone());
        Ok(url)
    }
}

fn failure<E>(error: &aws_sdk_sqs::error::SdkError<E, aws_sdk_sqs::config::http::HttpResponse>) -> CallbackError
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let classified = crate::nodes::classify("SQS", error);
    CallbackError { code: classified.code, message: classified.message, retryable: classified.retryable }
}

#[async_trait]
impl CallbackSender for AwsCallbackSender {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<(), CallbackError> {
        if !is_queue_target(url) {
            return self.http.post(url, headers, body, timeout_ms).await;
        }
        let send = async {
            let queue_url = self.queue_url(url).await?;
            let mut message =
                self.sqs.send_message().queue_url(queue_url).message_body(String::from_utf8_lossy(&body).into_owned());
            for (name, value) in headers.iter().filter(|(name, _)| *name != "content-type") {
                let attribute = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(value)
                    .build()
                    .expect("type and value are set");
                message = message.message_attributes(*name, attribute);
            }
            message.send().await.map(drop).map_err(|error| failure(&error))
        };
        match tokio::time::timeout(Duration::from_millis(timeout_ms), send).await {
            Ok(result) => result,
            Err(_) => Err(CallbackError {
                code: "aws_unavailable".into(),
                message: format!("SQS did not answer within {timeout_ms} ms"),
                retryable: true,
            }),
        }
    }
}
