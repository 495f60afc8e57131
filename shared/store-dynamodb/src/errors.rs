//! SDK errors mapped onto `StoreError`: throttling, timeouts and dispatch failures are
//! retryable (`Unavailable`); a failed condition is reported to the caller as what it means.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use trellis_core::StoreError;

/// Any SDK failure that is not a condition the caller handles.
pub(crate) fn unavailable<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    error: SdkError<E, R>,
) -> StoreError {
    let detail = match &error {
        SdkError::ServiceError(service) => {
            let inner = service.err();
            format!("{}: {}", inner.code().unwrap_or("unknown"), inner.message().unwrap_or(""))
        }
        other => format!("{other:?}"),
    };
    StoreError::Unavailable(detail)
}

/// Whether the error is DynamoDB refusing a write that breaks its size limits.
pub(crate) fn is_size_limit<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    match error {
        SdkError::ServiceError(service) => {
            service.err().code() == Some("ValidationException")
                && service.err().message().is_some_and(|m| m.contains("size") || m.contains("length"))
        }
        _ => false,
    }
}

/// A conditional write whose condition did not hold is fine here (the record had already
/// moved on); any other failure is reported.
pub(crate) fn unless_condition_failed<T, E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    result: Result<T, SdkError<E, R>>,
) -> Result<(), StoreError> {
    match result {
        Ok(_) => Ok(()),
        Err(SdkError::ServiceError(service)) if service.err().code() == Some("ConditionalCheckFailedException") => {
            Ok(())
        }
        Err(error) => Err(unavailable(error)),
    }
}

/// The outcome of a conditional write: `Some` when it was written, `None` when its condition
/// did not hold; any other failure is reported.
pub(crate) fn written_unless_condition_failed<T, E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    result: Result<T, SdkError<E, R>>,
) -> Result<Option<T>, StoreError> {
    match result {
        Ok(output) => Ok(Some(output)),
        Err(SdkError::ServiceError(service)) if service.err().code() == Some("ConditionalCheckFailedException") => {
            Ok(None)
        }
        Err(error) => Err(unavailable(error)),
    }
}
