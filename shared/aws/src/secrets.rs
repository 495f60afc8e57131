//! The serverless host's secret resolvers ([`SecretResolver`]): AWS Secrets Manager or SSM
//! Parameter Store (`SecureString`, decrypted), selected by `TRELLIS_SECRETS_BACKEND`, each
//! reading only names under one prefix (`TRELLIS_SECRETS_PREFIX`), which is also the one
//! prefix the SAM template grants the functions read access to.
//!
//! Secrets belong to a tenant: reference `github-token` in a run of tenant `acme` is the secret
//! `<prefix>acme/github-token` (Secrets Manager: its `SecretString`, or its `SecretBinary`) or
//! the parameter `<prefix>acme/github-token` (SSM, read `WithDecryption`) — see
//! [`secret_name`]. References and tenants are checked by
//! [`trellis_core::secrets::check_ref`] (no `/`), so a run can never name anything outside its
//! tenant's folder of the prefix; a tenant whose id is not such a name has no secrets here
//! (`credential_not_found`).
//!
//! Errors: a missing name is `credential_not_found`; access denied, a deleted or undecryptable
//! secret is `credential_unavailable`; throttling, timeouts and network or service failures are
//! `credential_unavailable` and retryable. Nothing here logs a value.

use std::fmt;

use async_trait::async_trait;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use trellis_core::secrets::{check_ref, Secret, SecretError, SecretRequest, SecretResolver};

use crate::settings::SettingsError;

/// Which backend resolves `credentialsRef` (`TRELLIS_SECRETS_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecretsBackend {
    /// `none` (the default): no resolver; discovery advertises no `secrets`.
    #[default]
    None,
    /// `secretsmanager`: AWS Secrets Manager.
    SecretsManager,
    /// `ssm`: SSM Parameter Store (`SecureString` or `String` parameters).
    Ssm,
}

/// The secrets settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecretsSettings {
    /// `TRELLIS_SECRETS_BACKEND`: `none` (default), `secretsmanager` or `ssm`.
    pub backend: SecretsBackend,
    /// `TRELLIS_SECRETS_PREFIX`: the name prefix every reference is read under (default
    /// [`DEFAULT_SECRETS_MANAGER_PREFIX`] or [`DEFAULT_SSM_PREFIX`]); it must end with `/`,
    /// and for SSM start with `/`.
    pub prefix: String,
}

/// The default Secrets Manager prefix.
pub const DEFAULT_SECRETS_MANAGER_PREFIX: &str = "trellis/";
/// The default SSM prefix.
pub const DEFAULT_SSM_PREFIX: &str = "/trellis/";

impl SecretsSettings {
    /// Reads `TRELLIS_SECRETS_BACKEND` and `TRELLIS_SECRETS_PREFIX` through `lookup`.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let name = "TRELLIS_SECRETS_BACKEND";
        let backend = match lookup(name).as_deref().map(str::trim) {
            None | Some("" | "none") => SecretsBackend::None,
            Some("secretsmanager") => SecretsBackend::SecretsManager,
            Some("ssm") => SecretsBackend::Ssm,
            Some(other) => {
                let reason = format!("`{other}` is not one of none, secretsmanager, ssm");
                return Err(SettingsError::Invalid { name, reason });
            }
        };
        let default = match backend {
            SecretsBackend::Ssm => DEFAULT_SSM_PREFIX,
            _ => DEFAULT_SECRETS_MANAGER_PREFIX,
        };
        let name = "TRELLIS_SECRETS_PREFIX";
        let prefix = lookup(name).map(|prefix| prefix.trim().to_owned()).filter(|p| !p.is_empty());
        let prefix = prefix.unwrap_or_else(|| default.to_owned());
        let valid_chars = prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.'));
        if !prefix.ends_with('/') || !valid_chars || (backend == SecretsBackend::Ssm && !prefix.starts_with('/')) {
            let reason = "must be letters, digits, `/`, `_`, `-` and `.`, end with `/` (and for ssm start with `/`), \
                          e.g. trellis/ or /trellis/";
            return Err(SettingsError::Invalid { name, reason: reason.to_owned() });
        }
        Ok(Self { backend, prefix })
    }
}

/// The resolver `settings` select, over clients built from `config`.
pub fn resolver(
    settings: &SecretsSettings,
    config: &aws_config::SdkConfig,
) -> Option<std::sync::Arc<dyn SecretResolver>> {
    match settings.backend {
        SecretsBackend::None => None,
        SecretsBackend::SecretsManager => Some(std::sync::Arc::new(SecretsManagerSecrets::new(
            aws_sdk_secretsmanager::Client::new(config),
            settings.prefix.clone(),
        ))),
        SecretsBackend::Ssm => Some(std::sync::Arc::new(ParameterStoreSecrets::new(
            aws_sdk_ssm::Client::new(config),
            settings.prefix.clone(),
        ))),
    }
}

/// The name `reference` has for `tenant`'s runs under `prefix` (which ends with `/`):
/// `<prefix><tenant>/<reference>`. A tenant or a reference that is not a plain name (letters,
/// digits, `.`, `_`, `-`; no `/`) names nothing: `credential_not_found`, so no run reaches
/// another tenant's folder or anything else under the prefix.
pub fn secret_name(prefix: &str, request: SecretRequest<'_>) -> Result<String, SecretError> {
    let not_found = || SecretError::NotFound { reference: request.reference.to_owned() };
    check_ref(request.tenant).map_err(|_| not_found())?;
    check_ref(request.reference).map_err(|_| not_found())?;
    Ok(format!("{prefix}{}/{}", request.tenant, request.reference))
}

/// How a failed SDK call is reported: by the error's code, never its raw body.
fn classify<E: ProvideErrorMetadata, R>(reference: &str, error: &SdkError<E, R>, not_found: &[&str]) -> SecretError {
    let reference = reference.to_owned();
    match error {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or("unknown");
            if not_found.contains(&code) {
                return SecretError::NotFound { reference };
            }
            let transient = matches!(
                code,
                "ThrottlingException" | "InternalServiceError" | "InternalServerError" | "ServiceUnavailable"
            );
            let reason = format!("the service answered {code}");
            if transient {
                SecretError::Transient { reference, reason }
            } else {
                SecretError::Unavailable { reference, reason }
            }
        }
        SdkError::TimeoutError(_) => SecretError::Transient { reference, reason: "the call timed out".to_owned() },
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            SecretError::Transient { reference, reason: "the service could not be reached".to_owned() }
        }
        _ => SecretError::Unavailable { reference, reason: "the request could not be built".to_owned() },
    }
}

/// AWS Secrets Manager under one prefix, one folder per tenant.
pub struct SecretsManagerSecrets {
    client: aws_sdk_secretsmanager::Client,
    prefix: String,
}

impl fmt::Debug for SecretsManagerSecrets {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("SecretsManagerSecrets").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl SecretsManagerSecrets {
    /// Reads `<prefix><tenant>/<reference>` through `client`.
    pub fn new(client: aws_sdk_secretsmanager::Client, prefix: String) -> Self {
        Self { client, prefix }
    }
}

#[async_trait]
impl SecretResolver for SecretsManagerSecrets {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        let reference = request.reference;
        let answer = self
            .client
            .get_secret_value()
            .secret_id(secret_name(&self.prefix, request)?)
            .send()
            .await
            .map_err(|error| classify(reference, &error, &["ResourceNotFoundException"]))?;
        if let Some(text) = answer.secret_string() {
            return Ok(Secret::new(text.as_bytes()));
        }
        if let Some(binary) = answer.secret_binary() {
            return Ok(Secret::new(binary.as_ref()));
        }
        Err(SecretError::Unavailable { reference: reference.to_owned(), reason: "the secret has no value".to_owned() })
    }

    fn backend(&self) -> &'static str {
        "secretsmanager"
    }
}

/// SSM Parameter Store under one prefix, one folder per tenant (parameters read with
/// decryption).
pub struct ParameterStoreSecrets {
    client: aws_sdk_ssm::Client,
    prefix: String,
}

impl fmt::Debug for ParameterStoreSecrets {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("ParameterStoreSecrets").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl ParameterStoreSecrets {
    /// Reads `<prefix><tenant>/<reference>` through `client`.
    pub fn new(client: aws_sdk_ssm::Client, prefix: String) -> Self {
        Self { client, prefix }
    }
}

#[async_trait]
impl SecretResolver for ParameterStoreSecrets {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        let reference = request.reference;
        let answer = self
            .client
            .get_parameter()
            .name(secret_name(&self.prefix, request)?)
            .with_decryption(true)
            .send()
            .await
            .map_err(|error| classify(reference, &error, &["ParameterNotFound", "ParameterVersionNotFound"]))?;
        answer
            .parameter()
            .and_then(|parameter| parameter.value())
            .map(|value| Secret::new(value.as_bytes()))
            .ok_or_else(|| SecretError::Unavailable {
                reference: reference.to_owned(),
                reason: "the parameter has no value".to_owned(),
            })
    }

    fn backend(&self) -> &'static str {
        "ssm"
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<SecretsSettings, SettingsError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        SecretsSettings::from_lookup(&move |name| map.get(name).cloned())
    }

    #[test]
    fn names_are_the_tenant_folder_of_the_prefix() {
        let name = |tenant, reference| secret_name("trellis/", SecretRequest { tenant, reference });
        assert_eq!(name("acme", "api-token"), Ok("trellis/acme/api-token".to_owned()));
        assert_eq!(name("default", "k.v2"), Ok("trellis/default/k.v2".to_owned()));
        for (tenant, reference) in [("a/b", "k"), ("..", "k"), ("", "k"), ("acme", "x/y"), ("acme corp", "k")] {
            let refused = name(tenant, reference).unwrap_err();
            assert_eq!(refused.code(), "credential_not_found", "{tenant:?} {reference:?}");
        }
    }

    #[test]
    fn settings_select_a_backend_under_one_prefix() {
        assert_eq!(read(&[]).unwrap(), SecretsSettings { backend: SecretsBackend::None, prefix: "trellis/".into() });
        let ssm = read(&[("TRELLIS_SECRETS_BACKEND", "ssm")]).unwrap();
        assert_eq!((ssm.backend, ssm.prefix.as_str()), (SecretsBackend::Ssm, "/trellis/"));
        let sm =
            read(&[("TRELLIS_SECRETS_BACKEND", "secretsmanager"), ("TRELLIS_SECRETS_PREFIX", "prod/app/")]).unwrap();
        assert_eq!((sm.backend, sm.prefix.as_str()), (SecretsBackend::SecretsManager, "prod/app/"));
        for (backend, prefix) in [("vault", "x/"), ("ssm", "trellis/"), ("secretsmanager", "trellis"), ("ssm", "/a b/")]
        {
            let bad = read(&[("TRELLIS_SECRETS_BACKEND", backend), ("TRELLIS_SECRETS_PREFIX", prefix)]);
            assert!(matches!(bad, Err(SettingsError::Invalid { .. })), "{backend} {prefix}: {bad:?}");
        }
    }
}
