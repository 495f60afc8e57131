//! The AWS service nodes (`docs/aws-nodes.md`): activities that call AWS APIs through the
//! functions' IAM role, with the retry and timeout model of every activity
//! (`settings.retry`, `settings.timeouts`):
//!
//! - [`lambda`]: `vendor.trellis.aws.lambdaInvoke` — invoke a function, request/response;
//! - [`sqs`]: `vendor.trellis.aws.sqsSend` — send a message to a queue;
//! - [`events`]: `vendor.trellis.aws.eventsPut` — put an event on an EventBridge bus.
//!
//! Their config strings and JSON values take the `{{inputs.x}}` / `{{variables.x}}` templates
//! of `core.http.request`; their outputs land in the run's variables under the node id. Only
//! the AWS registry holds them: the embedded host answers `422 capability_required` for them
//! (a function URL is called with `core.http.request`). Which functions, queues and buses a
//! node reaches is decided by IAM (the template's `LambdaInvokeArns`, `SqsSendArns` and
//! `EventBusArns`), not by the workflow.
//!
//! Errors carry stable codes: `aws_function_error` (the function ran and failed; never
//! retryable), `aws_throttled` and `aws_unavailable` (5xx, timeouts, network: retryable),
//! `aws_access_denied`, `aws_not_found`, `aws_request_invalid` (not retryable).

pub mod events;
pub mod lambda;
pub mod sqs;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_lambda::config::http::HttpResponse;
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use serde_json::{json, Map, Value};
use trellis_core::activity::template::{self, Scope};
use trellis_core::activity::ActivityError;
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::{NodeContext, NodeRegistry};
use trellis_core::run::RunError;

/// The SDK clients the service nodes call with.
#[derive(Debug, Clone)]
pub struct ServiceClients {
    /// Lambda (`Invoke`).
    pub lambda: aws_sdk_lambda::Client,
    /// SQS (`SendMessage`).
    pub sqs: aws_sdk_sqs::Client,
    /// EventBridge (`PutEvents`).
    pub events: aws_sdk_eventbridge::Client,
}

impl ServiceClients {
    /// Clients over one SDK configuration, with the SDK's own retries off: the node's
    /// `settings.retry` decides (a throttled attempt is an `aws_throttled` attempt, retried
    /// with the node's backoff and recorded as `node.retried`).
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        let config = config.to_builder().retry_config(aws_config::retry::RetryConfig::disabled()).build();
        Self {
            lambda: aws_sdk_lambda::Client::new(&config),
            sqs: aws_sdk_sqs::Client::new(&config),
            events: aws_sdk_eventbridge::Client::new(&config),
        }
    }
}

/// `registry` with the three service nodes over `clients`.
pub fn register(registry: NodeRegistry, clients: &ServiceClients) -> NodeRegistry {
    registry
        .register(Arc::new(lambda::LambdaInvoke::new(clients.lambda.clone())))
        .register(Arc::new(sqs::SqsSend::new(clients.sqs.clone())))
        .register(Arc::new(events::EventsPut::new(clients.events.clone())))
}

/// The default per-attempt budget of a service call.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// What a config field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A string (templates allowed), non-empty once rendered.
    Text,
    /// Any JSON value (templates inside strings allowed).
    Json,
    /// A whole number within bounds (no templates).
    Number(u64, u64),
}

/// One config field of a service node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub name: &'static str,
    pub required: bool,
    pub shape: Shape,
}

pub(crate) const fn field(name: &'static str, required: bool, shape: Shape) -> Field {
    Field { name, required, shape }
}

/// Checks a node's config at registration: known fields, required ones present, each of its
/// shape, template syntax.
pub(crate) fn check(type_id: &str, config: &Map<String, Value>, fields: &[Field]) -> Result<(), ConfigIssue> {
    let names: Vec<&str> = fields.iter().map(|field| field.name).collect();
    if let Some(unknown) = config.keys().find(|key| !names.contains(&key.as_str())) {
        return Err(ConfigIssue::Invalid(format!(
            "config.{unknown} is not a {type_id} field (allowed: {})",
            names.join(", ")
        )));
    }
    for field in fields {
        let value = config.get(field.name).filter(|value| !value.is_null());
        let Some(value) = value else {
            if field.required {
                return Err(ConfigIssue::Invalid(format!("config.{} is required", field.name)));
            }
            continue;
        };
        match field.shape {
            Shape::Text => match value {
                Value::String(text) if !text.trim().is_empty() => template::check_string(text)
                    .map_err(|error| ConfigIssue::Invalid(format!("config.{}: {}", field.name, error.message)))?,
                _ => return Err(ConfigIssue::Invalid(format!("config.{} must be a non-empty string", field.name))),
            },
            Shape::Json => template::check_value(value).map_err(|error| {
                ConfigIssue::Invalid(format!("config.{}{}: {}", field.name, error.path, error.message))
            })?,
            Shape::Number(low, high) => {
                if !value.as_u64().is_some_and(|number| (low..=high).contains(&number)) {
                    return Err(ConfigIssue::Invalid(format!(
                        "config.{} must be a whole number from {low} to {high}",
                        field.name
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Renders a node's config against its inputs and the run's variables; a text field that
/// renders to anything but a non-empty string fails the node (`validation_error` naming it).
pub(crate) fn render(context: &NodeContext<'_>, fields: &[Field]) -> Result<Map<String, Value>, RunError> {
    let scope = Scope::new(&context.inputs, context.variables);
    let mut rendered = Map::new();
    for field in fields {
        let Some(value) = context.config.get(field.name).filter(|value| !value.is_null()) else { continue };
        let at = format!("/config/{}", field.name);
        let value = match field.shape {
            Shape::Number(..) => value.clone(),
            Shape::Json => template::render_value(value, &scope).map_err(|error| error.prefixed(&at).to_run_error())?,
            Shape::Text => {
                let text = value.as_str().unwrap_or_default();
                let text = template::render_string(text, &scope, template::Encoding::Plain)
                    .map_err(|error| error.prefixed(&at).to_run_error())?;
                if text.trim().is_empty() {
                    let mut error = RunError::new("validation_error", format!("config.{} rendered empty", field.name));
                    error.details = Some(json!({ "path": at }));
                    return Err(error);
                }
                Value::String(text)
            }
        };
        rendered.insert(field.name.to_owned(), value);
    }
    Ok(rendered)
}

/// `config.timeoutMs`, else [`DEFAULT_TIMEOUT_MS`].
pub(crate) fn timeout_ms(config: &Map<String, Value>) -> u64 {
    config.get("timeoutMs").and_then(Value::as_u64).unwrap_or(DEFAULT_TIMEOUT_MS)
}

/// A string of the prepared request.
pub(crate) fn text<'a>(request: &'a Value, name: &str) -> Result<&'a str, ActivityError> {
    request
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ActivityError::new("validation_error", format!("the prepared request has no {name}"), false))
}

/// A JSON value as a message body: a string as it is, anything else as JSON text.
pub(crate) fn body_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Runs one SDK call within `timeout_ms`; running out is `aws_unavailable` (retryable: the
/// call may or may not have been made, as with any timeout).
pub(crate) async fn bounded<T>(
    timeout_ms: u64,
    call: impl Future<Output = Result<T, ActivityError>>,
) -> Result<T, ActivityError> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), call).await {
        Ok(result) => result,
        Err(_) => Err(ActivityError::new("aws_unavailable", format!("no answer within {timeout_ms} ms"), true)),
    }
}

/// Error codes that mean "slow down" across AWS services.
const THROTTLING: [&str; 6] = [
    "TooManyRequestsException",
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
];

/// Error codes that mean the service failed inside (an entry-level answer has no HTTP status).
const INTERNAL: [&str; 3] = ["InternalFailure", "InternalException", "InternalError"];

/// The node's error code for an AWS error `code` answered with HTTP `status` (0: none, as for
/// one refused entry of a batch), and whether it is worth another attempt.
pub(crate) fn stable_code(code: &str, status: u16) -> (&'static str, bool) {
    if THROTTLING.contains(&code) || status == 429 {
        ("aws_throttled", true)
    } else if status >= 500 || INTERNAL.contains(&code) {
        ("aws_unavailable", true)
    } else if code.contains("AccessDenied") || code.contains("NotAuthorized") || status == 403 {
        ("aws_access_denied", false)
    } else if code.contains("NotFound") || code.contains("NonExistent") || code == "QueueDoesNotExist" || status == 404
    {
        ("aws_not_found", false)
    } else {
        ("aws_request_invalid", false)
    }
}

/// Classifies an SDK error of `service` into the node's error codes (see the module docs).
pub(crate) fn classify<E>(service: &str, error: &SdkError<E, HttpResponse>) -> ActivityError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (code, message) = match error {
        SdkError::ServiceError(failure) => {
            let inner = failure.err();
            (inner.code().unwrap_or("Unknown").to_owned(), inner.message().unwrap_or("").to_owned())
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => {
            return ActivityError::new("aws_unavailable", format!("{service} could not be reached: {error}"), true)
        }
        SdkError::ResponseError(_) => {
            return ActivityError::new("aws_unavailable", format!("{service} answered unreadably: {error}"), true)
        }
        _ => return ActivityError::new("aws_request_invalid", format!("the {service} request: {error}"), false),
    };
    let status = error.raw_response().map_or(0, |response| response.status().as_u16());
    let details = json!({ "service": service, "awsCode": code, "status": status });
    let text = format!("{service} refused the call: {code}{}{message}", if message.is_empty() { "" } else { ": " });
    let (stable, retryable) = stable_code(&code, status);
    ActivityError::new(stable, text, retryable).with_details(details)
}

/// The `awsServiceNodes` discovery block: the kinds this host runs.
pub(crate) fn capability() -> Value {
    json!({ "supported": true, "kinds": [lambda::TYPE_ID, sqs::TYPE_ID, events::TYPE_ID], "authorization": "iam" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_error_codes_map_to_stable_codes_and_a_retry_class() {
        assert_eq!(stable_code("TooManyRequestsException", 429), ("aws_throttled", true));
        assert_eq!(stable_code("ThrottlingException", 0), ("aws_throttled", true));
        assert_eq!(stable_code("ServiceException", 500), ("aws_unavailable", true));
        assert_eq!(stable_code("InternalFailure", 0), ("aws_unavailable", true));
        assert_eq!(stable_code("AccessDeniedException", 403), ("aws_access_denied", false));
        assert_eq!(stable_code("ResourceNotFoundException", 404), ("aws_not_found", false));
        assert_eq!(stable_code("InvalidParameterValueException", 400), ("aws_request_invalid", false));
    }
}
