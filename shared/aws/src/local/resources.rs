//! The local stack's resources under one name: the table `{name}`, the queues of
//! [`crate::provision::create_queues`] (`{name}-steps`, `{name}-steps-dlq`,
//! `{name}-completions.fifo`, `{name}-completions-dlq.fifo`), the trigger queue
//! (`{name}-triggers`, `{name}-triggers-dlq`), where EventBridge is reachable the run-event
//! bus `{name}-runs`, and where S3 is the blob bucket `{name}-blobs` (lower case). Created when missing, reused when they exist, so a restart on
//! the same name finds its runs.

use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlError;

use crate::provision::{create_queues, Queues};

/// The longest name: SQS queue names have at most 80 characters, and the longest suffix is
/// `-completions-dlq.fifo`.
pub const MAX_NAME_LEN: usize = 80 - "-completions-dlq.fifo".len();

/// Why the resources could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ResourcesError {
    /// The name cannot name a table and queues.
    #[error(
        "resource name `{0}` is invalid: use 3 to {MAX_NAME_LEN} letters, digits, `-` or `_` (it names the table and the queues)"
    )]
    InvalidName(String),
    /// DynamoDB refused or could not be reached.
    #[error("cannot create or reuse the table `{table}`: {message}")]
    Table {
        /// The table.
        table: String,
        /// The cause.
        message: String,
    },
    /// EventBridge refused or could not be reached.
    #[error("cannot create or reuse the event bus `{bus}`: {message}")]
    Bus {
        /// The bus.
        bus: String,
        /// The cause.
        message: String,
    },
    /// S3 refused or could not be reached.
    #[error("cannot create or reuse the blob bucket `{bucket}`: {message}")]
    Bucket {
        /// The bucket.
        bucket: String,
        /// The cause.
        message: String,
    },
    /// SQS refused or could not be reached.
    #[error("cannot create or reuse the queues `{prefix}-…`: {message}")]
    Queues {
        /// The name prefix.
        prefix: String,
        /// The cause.
        message: String,
    },
}

/// The table and queues of one local stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// The table name.
    pub table: String,
    /// The queue URLs.
    pub queues: Queues,
    /// The trigger queue's URL and ARN.
    pub triggers: (String, String),
}

/// Checks that `name` can name the table and the queues.
pub fn check_name(name: &str) -> Result<(), ResourcesError> {
    let fits = (3..=MAX_NAME_LEN).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if fits {
        Ok(())
    } else {
        Err(ResourcesError::InvalidName(name.to_owned()))
    }
}

/// The URL of the queue `name`, `None` when it does not exist.
async fn existing_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<Option<String>, String> {
    match sqs.get_queue_url().queue_name(name).send().await {
        Ok(found) => Ok(found.queue_url().map(str::to_owned)),
        Err(error) if matches!(error.as_service_error(), Some(GetQueueUrlError::QueueDoesNotExist(_))) => Ok(None),
        Err(error) => Err(format!("{error:?}")),
    }
}

/// The queues under `prefix` when all four exist.
async fn existing_queues(sqs: &aws_sdk_sqs::Client, prefix: &str) -> Result<Option<Queues>, String> {
    let mut urls = Vec::new();
    for suffix in ["-steps", "-steps-dlq", "-completions.fifo", "-completions-dlq.fifo"] {
        match existing_queue(sqs, &format!("{prefix}{suffix}")).await? {
            Some(url) => urls.push(url),
            None => return Ok(None),
        }
    }
    let [step, step_dlq, completion, completion_dlq] = <[String; 4]>::try_from(urls).expect("four queues");
    Ok(Some(Queues { step, step_dlq, completion, completion_dlq }))
}

/// Creates the table and the queues of `name` unless they exist (a queue that exists is
/// reused as it is), with `max_receive_count` deliveries before a dead-letter queue and
/// `visibility_seconds` of visibility timeout on a new queue.
pub async fn ensure(
    config: &aws_config::SdkConfig,
    name: &str,
    max_receive_count: u32,
    visibility_seconds: u32,
) -> Result<Resources, ResourcesError> {
    check_name(name)?;
    let ddb = aws_sdk_dynamodb::Client::new(config);
    trellis_store_dynamodb::create_table(&ddb, name)
        .await
        .map_err(|error| ResourcesError::Table { table: name.to_owned(), message: error.to_string() })?;
    let sqs = aws_sdk_sqs::Client::new(config);
    let queue_error = |message: String| ResourcesError::Queues { prefix: name.to_owned(), message };
    let queues = match existing_queues(&sqs, name).await.map_err(queue_error)? {
        Some(queues) => queues,
        None => create_queues(&sqs, name, max_receive_count, visibility_seconds).await.map_err(queue_error)?,
    };
    let triggers = match existing_queue(&sqs, &format!("{name}-triggers")).await.map_err(queue_error)? {
        Some(url) => {
            let arn = crate::provision::queue_arn(&sqs, &url).await.map_err(queue_error)?;
            (url, arn)
        }
        None => crate::provision::create_trigger_queue(&sqs, name, max_receive_count, visibility_seconds)
            .await
            .map_err(queue_error)?,
    };
    Ok(Resources { table: name.to_owned(), queues, triggers })
}

/// The blob bucket's name for a stack `name`: S3 names are lower case, without `_`, at most
/// 63 characters.
pub fn bucket_name(name: &str) -> String {
    let base: String = name.to_ascii_lowercase().replace('_', "-").chars().take(63 - "-blobs".len()).collect();
    format!("{base}-blobs")
}

/// Creates the blob bucket of `name` ([`bucket_name`]) unless it exists; returns its name.
pub async fn ensure_bucket(s3: &aws_sdk_s3::Client, name: &str) -> Result<String, ResourcesError> {
    let bucket = bucket_name(name);
    match s3.create_bucket().bucket(&bucket).send().await {
        Ok(_) => Ok(bucket),
        Err(error)
            if error
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists()) =>
        {
            Ok(bucket)
        }
        Err(error) => Err(ResourcesError::Bucket { bucket, message: format!("{error:?}") }),
    }
}

/// Creates the run-event bus `{name}-runs` unless it exists; returns its name.
pub async fn ensure_bus(config: &aws_config::SdkConfig, name: &str) -> Result<String, ResourcesError> {
    let bus = format!("{name}-runs");
    let events = aws_sdk_eventbridge::Client::new(config);
    match events.create_event_bus().name(&bus).send().await {
        Ok(_) => Ok(bus),
        Err(error) if error.as_service_error().is_some_and(|e| e.is_resource_already_exists_exception()) => Ok(bus),
        Err(error) => Err(ResourcesError::Bus { bus, message: format!("{error:?}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_a_queue_are_refused() {
        assert!(check_name("trellis-local").is_ok());
        assert!(check_name("dev_1").is_ok());
        for bad in ["", "ab", "has space", "dot.ted", &"x".repeat(MAX_NAME_LEN + 1)] {
            assert!(matches!(check_name(bad), Err(ResourcesError::InvalidName(_))), "{bad}");
        }
    }
}
