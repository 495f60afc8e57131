//! The secret-resolver port: how a work node's credential reference (`credentialsRef` on a
//! `WorkflowNode`, or a kind's own config such as `conformance.secret.echo`'s `secretId`)
//! becomes the cleartext it needs for one call.
//!
//! - [`SecretResolver`]: the port, implemented per backend (environment variables and a
//!   secrets file embedded, Secrets Manager or SSM Parameter Store on AWS) and handed to the
//!   activities that need it by the composition root;
//! - [`Secret`]: the resolved value. Its `Debug` and `Display` show a SHA-256 prefix and the
//!   length, never the cleartext, and it is not `Serialize`: it cannot land in an event, a
//!   snapshot or a log line by accident. The bytes are zeroed when it is dropped;
//! - [`SecretError`]: why a reference could not be resolved, with the spec's codes
//!   (`credential_unavailable`, `credential_not_found`, …) and a retryable class for a
//!   transient backend failure;
//! - [`check_ref`]: the syntax of a reference, checked when a workflow is registered.
//!
//! A secret is resolved inside the attempt that uses it, and nothing resolved is kept: the
//! cleartext exists only for the call (OpenWOP SR-1: raw key material never appears in events,
//! snapshots, debug bundles, webhook bodies or logs).

use std::fmt;

use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::activity::ActivityError;
use crate::run::RunError;

/// The longest reference accepted.
pub const MAX_REF_LEN: usize = 128;

/// The id of the OpenWOP conformance canary secret (`openwop-smoke-byok-roundtrip`).
pub const CANARY_SECRET_ID: &str = "openwop-conformance-canary-secret";

/// Checks the syntax of a secret reference: 1–[`MAX_REF_LEN`] characters of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or digit. No `/`: every backend maps a
/// reference under one prefix (a file's key, `TRELLIS_SECRET_<NAME>`, a Secrets Manager or
/// SSM name under the configured prefix) and a reference can never step outside it.
pub fn check_ref(reference: &str) -> Result<(), String> {
    let valid = !reference.is_empty()
        && reference.len() <= MAX_REF_LEN
        && reference.starts_with(|c: char| c.is_ascii_alphanumeric())
        && reference.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "must be 1 to {MAX_REF_LEN} characters of letters, digits, `.`, `_` and `-`, starting with a letter or digit"
        ))
    }
}

/// A resolved secret. Never printed: `Debug` and `Display` show `sha256:<first 12 hex>…` and
/// the byte length.
pub struct Secret {
    bytes: Vec<u8>,
}

impl Secret {
    /// Wraps resolved bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self { bytes: bytes.into() }
    }

    /// The cleartext, for the one call that needs it.
    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// The cleartext as UTF-8 text, when it is (a header value, a token).
    pub fn expose_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.bytes).ok()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The SHA-256 of the cleartext, lower-case hex (what `conformance.secret.echo` emits).
    pub fn sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        for byte in self.bytes.iter_mut() {
            // A volatile-free best effort: black_box keeps the writes from being elided.
            *byte = std::hint::black_box(0);
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, formatter)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hash = self.sha256_hex();
        write!(formatter, "Secret(sha256:{}…, {} bytes)", &hash[..12], self.bytes.len())
    }
}

/// What a resolver is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretRequest<'a> {
    /// The tenant of the run asking (a resolver may restrict a secret to some tenants).
    pub tenant: &'a str,
    /// The reference (already checked by [`check_ref`]).
    pub reference: &'a str,
}

/// Why a reference did not resolve. The messages name the reference, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No resolver is configured on this host (`credential_unavailable`, not retryable).
    #[error("this host has no secret resolver configured; `{reference}` cannot be resolved")]
    NotConfigured {
        /// The reference.
        reference: String,
    },
    /// The reference names no secret the run's tenant may read (`credential_not_found`). A
    /// secret restricted to other tenants is reported the same way: its existence is not
    /// revealed.
    #[error("no secret `{reference}` is available to this run")]
    NotFound {
        /// The reference.
        reference: String,
    },
    /// The reference is malformed (`credential_not_found`).
    #[error("`{reference}` is not a valid secret reference: {reason}")]
    InvalidRef {
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The backend refused or failed in a way retrying will not fix: access denied, a value
    /// that is not text where text is needed, … (`credential_unavailable`, not retryable).
    #[error("secret `{reference}` is unavailable: {reason}")]
    Unavailable {
        /// The reference.
        reference: String,
        /// Why (never the value).
        reason: String,
    },
    /// A transient backend failure: a timeout, throttling, a network error
    /// (`credential_unavailable`, retryable).
    #[error("secret `{reference}` could not be read now: {reason}")]
    Transient {
        /// The reference.
        reference: String,
        /// Why (never the value).
        reason: String,
    },
}

impl SecretError {
    /// The stable code (OpenWOP §2.7).
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::InvalidRef { .. } => "credential_not_found",
            Self::NotConfigured { .. } | Self::Unavailable { .. } | Self::Transient { .. } => "credential_unavailable",
        }
    }

    /// Whether another attempt may succeed.
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Transient { .. })
    }

    /// The reference it is about.
    pub fn reference(&self) -> &str {
        match self {
            Self::NotConfigured { reference }
            | Self::NotFound { reference }
            | Self::InvalidRef { reference, .. }
            | Self::Unavailable { reference, .. }
            | Self::Transient { reference, .. } => reference,
        }
    }

    /// As an attempt's failure, `details: {credentialsRef}`.
    pub fn to_activity_error(&self) -> ActivityError {
        ActivityError::new(self.code(), self.to_string(), self.retryable())
            .with_details(json!({ "credentialsRef": self.reference() }))
    }

    /// As a node failure before any attempt (e.g. no resolver configured).
    pub fn to_run_error(&self) -> RunError {
        let mut error = RunError::new(self.code(), self.to_string());
        error.details = Some(json!({ "credentialsRef": self.reference() }));
        error
    }
}

/// Resolves secret references. Object-safe (`Arc<dyn SecretResolver>`), like the other ports.
#[async_trait]
pub trait SecretResolver: Send + Sync + fmt::Debug {
    /// Resolves one reference for one call. Implementations never log the value.
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError>;

    /// A short name of the backend for logs and docs (`env`, `file`, `secretsmanager`, …).
    fn backend(&self) -> &'static str;
}

/// The `secrets` discovery block of a host with a resolver (OpenWOP §1.2): secrets are
/// resolved by the host within the run's tenant.
pub fn capability() -> Value {
    json!({ "supported": true, "scopes": ["tenant"], "resolution": "host-managed" })
}

/// Resolves `reference` through `resolver`, or fails with `credential_unavailable` when the
/// host has none.
pub async fn resolve_with(
    resolver: Option<&dyn SecretResolver>,
    tenant: &str,
    reference: &str,
) -> Result<Secret, SecretError> {
    let Some(resolver) = resolver else {
        return Err(SecretError::NotConfigured { reference: reference.to_owned() });
    };
    check_ref(reference).map_err(|reason| SecretError::InvalidRef { reference: reference.to_owned(), reason })?;
    resolver.resolve(SecretRequest { tenant, reference }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_its_value() {
        let secret = Secret::new("hunter2-very-secret");
        for text in [format!("{secret:?}"), format!("{secret}"), format!("{:#?}", secret)] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.starts_with("Secret(sha256:"), "{text}");
            assert!(text.ends_with("19 bytes)"), "{text}");
        }
        assert_eq!(secret.expose(), b"hunter2-very-secret");
        assert_eq!(secret.sha256_hex().len(), 64);
    }

    #[test]
    fn references_are_checked() {
        for good in [CANARY_SECRET_ID, "a", "GITHUB_TOKEN", "svc.v2-key"] {
            assert_eq!(check_ref(good), Ok(()), "{good}");
        }
        let long = "a".repeat(MAX_REF_LEN + 1);
        for bad in ["", "-a", "a/b", "../x", "a b", "ä", long.as_str()] {
            assert!(check_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_carry_the_spec_codes_and_a_retryable_class() {
        let reference = "k".to_owned();
        let cases = [
            (SecretError::NotConfigured { reference: reference.clone() }, "credential_unavailable", false),
            (SecretError::NotFound { reference: reference.clone() }, "credential_not_found", false),
            (
                SecretError::InvalidRef { reference: reference.clone(), reason: "x".into() },
                "credential_not_found",
                false,
            ),
            (
                SecretError::Unavailable { reference: reference.clone(), reason: "x".into() },
                "credential_unavailable",
                false,
            ),
            (SecretError::Transient { reference, reason: "x".into() }, "credential_unavailable", true),
        ];
        for (error, code, retryable) in cases {
            assert_eq!((error.code(), error.retryable()), (code, retryable), "{error}");
            let activity = error.to_activity_error();
            assert_eq!(activity.code, code);
            assert_eq!(activity.details, Some(json!({ "credentialsRef": "k" })));
        }
    }

    #[tokio::test]
    async fn no_resolver_is_credential_unavailable() {
        let error = resolve_with(None, "t", "k").await.unwrap_err();
        assert_eq!(error.code(), "credential_unavailable");
        assert!(!error.retryable());
    }
}
