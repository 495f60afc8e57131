//! What the README's test command provides and plain `cargo test` does not: the AWS
//! emulators (DynamoDB Local, moto) and the public Python SDK.
//!
//! Suites that need one of them are marked `#[ignore = "…"]`, so a plain `cargo test`
//! reports them as *ignored*, never as passed. The test command runs them with
//! `--include-ignored` and exports `TRELLIS_REQUIRE_EMULATORS=1`; a suite that is run but
//! finds its tool missing fails with a message naming the variables it looked for, so a
//! green run always means the suite ran.
//!
//! Endpoints follow the AWS SDK's own convention: a per-service
//! `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SQS`, or one `AWS_ENDPOINT_URL` for every
//! service (LocalStack's convention); the SDK reads the same variables when it builds clients.

use std::ffi::OsString;

/// The reason a suite marked `#[ignore]` gives for it.
pub const NEEDS_EMULATORS: &str = "needs the AWS emulators: run `bash scripts/test.sh`";

/// An AWS service whose endpoint a suite needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Amazon DynamoDB (DynamoDB Local).
    DynamoDb,
    /// Amazon SQS (moto).
    Sqs,
    /// AWS Secrets Manager (moto).
    SecretsManager,
    /// SSM Parameter Store (moto).
    Ssm,
    /// EventBridge (moto).
    EventBridge,
    /// Amazon S3 (moto): the runs' blobs.
    S3,
}

impl Service {
    fn variable(self) -> &'static str {
        match self {
            Self::DynamoDb => "AWS_ENDPOINT_URL_DYNAMODB",
            Self::Sqs => "AWS_ENDPOINT_URL_SQS",
            Self::SecretsManager => "AWS_ENDPOINT_URL_SECRETS_MANAGER",
            Self::Ssm => "AWS_ENDPOINT_URL_SSM",
            Self::EventBridge => "AWS_ENDPOINT_URL_EVENTBRIDGE",
            Self::S3 => "AWS_ENDPOINT_URL_S3",
        }
    }
}

/// Which of `services` have no endpoint under `lookup` (an environment reader): empty when
/// every one is reachable through its own variable or the shared `AWS_ENDPOINT_URL`.
pub fn missing_endpoints(services: &[Service], lookup: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    let shared = lookup("AWS_ENDPOINT_URL").is_some_and(|url| !url.is_empty());
    services
        .iter()
        .filter(|service| !(shared || lookup(service.variable()).is_some_and(|url| !url.is_empty())))
        .map(|service| service.variable())
        .collect()
}

/// Fails the calling test unless every one of `services` has an emulator endpoint.
///
/// # Panics
/// When an endpoint is missing: the suite was asked to run (it is `#[ignore]`d otherwise)
/// without the emulators the test command starts.
pub fn require_emulators(services: &[Service]) {
    let missing = missing_endpoints(services, |name| std::env::var(name).ok());
    assert!(
        missing.is_empty(),
        "this suite needs the AWS emulators but {} {} not set (nor AWS_ENDPOINT_URL); run `bash scripts/test.sh`{}",
        missing.join(" and "),
        if missing.len() == 1 { "is" } else { "are" },
        if std::env::var_os("TRELLIS_REQUIRE_EMULATORS").is_some() {
            " (TRELLIS_REQUIRE_EMULATORS is set: the emulators were expected)"
        } else {
            ""
        },
    );
}

/// The Python interpreter with the public SDK installed (`TRELLIS_SDK_PYTHON`).
///
/// # Panics
/// When the variable is not set: the SDK suite was asked to run without the SDK the test
/// command installs.
pub fn require_sdk_python() -> OsString {
    std::env::var_os("TRELLIS_SDK_PYTHON")
        .filter(|path| !path.is_empty())
        .expect("this suite needs the public Python SDK but TRELLIS_SDK_PYTHON is not set; run `bash scripts/test.sh`")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
    }

    #[test]
    fn per_service_endpoints_are_each_required() {
        let both = [Service::DynamoDb, Service::Sqs];
        assert_eq!(missing_endpoints(&both, env(&[])), ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"]);
        assert_eq!(
            missing_endpoints(&both, env(&[("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")])),
            ["AWS_ENDPOINT_URL_SQS"]
        );
        assert!(missing_endpoints(
            &both,
            env(&[
                ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
                ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4566")
            ])
        )
        .is_empty());
    }

    #[test]
    fn one_shared_endpoint_serves_every_service() {
        let both = [Service::DynamoDb, Service::Sqs];
        assert!(missing_endpoints(&both, env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")])).is_empty());
        assert_eq!(missing_endpoints(&both, env(&[("AWS_ENDPOINT_URL", "")])).len(), 2);
    }
}
