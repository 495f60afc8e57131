//! Creating the queues outside CloudFormation (emulators, local tries): the same shape as
//! `infra/template.yaml` — a standard step queue and a FIFO completion queue, each with a
//! dead-letter queue after `max_receive_count` deliveries, and the trigger queue (with its
//! dead-letter queue) whose messages start runs.

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;

/// The queue URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    /// The step queue.
    pub step: String,
    /// Its dead-letter queue.
    pub step_dlq: String,
    /// The FIFO completion queue.
    pub completion: String,
    /// Its dead-letter queue.
    pub completion_dlq: String,
}

async fn queue(
    sqs: &aws_sdk_sqs::Client,
    name: String,
    fifo: bool,
    redrive: Option<(&str, u32)>,
    visibility_seconds: u32,
) -> Result<String, String> {
    let mut create = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, visibility_seconds.to_string());
    if fifo {
        create = create.attributes(QueueAttributeName::FifoQueue, "true");
    }
    if let Some((dlq_url, max_receive)) = redrive {
        let arn = sqs
            .get_queue_attributes()
            .queue_url(dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .ok_or("the dead-letter queue has no ARN")?;
        let policy = json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive}).to_string();
        create = create.attributes(QueueAttributeName::RedrivePolicy, policy);
    }
    let created = create.send().await.map_err(|e| format!("{e:?}"))?;
    created.queue_url().map(str::to_owned).ok_or_else(|| "no queue URL".to_owned())
}

/// Creates the four queues under `prefix`.
pub async fn create_queues(
    sqs: &aws_sdk_sqs::Client,
    prefix: &str,
    max_receive_count: u32,
    visibility_seconds: u32,
) -> Result<Queues, String> {
    let step_dlq = queue(sqs, format!("{prefix}-steps-dlq"), false, None, 30).await?;
    let step =
        queue(sqs, format!("{prefix}-steps"), false, Some((&step_dlq, max_receive_count)), visibility_seconds).await?;
    let completion_dlq = queue(sqs, format!("{prefix}-completions-dlq.fifo"), true, None, 30).await?;
    let completion = queue(
        sqs,
        format!("{prefix}-completions.fifo"),
        true,
        Some((&completion_dlq, max_receive_count)),
        visibility_seconds,
    )
    .await?;
    Ok(Queues { step, step_dlq, completion, completion_dlq })
}

/// The ARN of the queue at `queue_url`.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Result<String, String> {
    sqs.get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| "the queue has no ARN".to_owned())
}

/// Creates the trigger queue `{prefix}-triggers` and its dead-letter queue
/// `{prefix}-triggers-dlq` (SQS answers an existing queue of the same attributes with its URL);
/// returns the trigger queue's URL and ARN.
pub async fn create_trigger_queue(
    sqs: &aws_sdk_sqs::Client,
    prefix: &str,
    max_receive_count: u32,
    visibility_seconds: u32,
) -> Result<(String, String), String> {
    let dlq = queue(sqs, format!("{prefix}-triggers-dlq"), false, None, 30).await?;
    let url =
        queue(sqs, format!("{prefix}-triggers"), false, Some((&dlq, max_receive_count)), visibility_seconds).await?;
    let arn = queue_arn(sqs, &url).await?;
    Ok((url, arn))
}
