//! Secrets from environment variables: reference `github-token` is `TRELLIS_SECRET_GITHUB_TOKEN`
//! (upper-cased, `-` and `.` as `_`). The variables are read once, when the host starts. They
//! belong to the host, not to a tenant, so only the tenants the host names may use them (the
//! embedded host names its default tenant alone): any other tenant's run gets
//! `credential_not_found`, exactly as for a variable that is not set. A secret for a named
//! tenant goes in the secrets file with `tenants`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use async_trait::async_trait;
use trellis_core::secrets::{Secret, SecretError, SecretRequest, SecretResolver};

/// The prefix of the variables read.
pub const PREFIX: &str = "TRELLIS_SECRET_";

/// The variable that holds `reference`.
pub fn variable_name(reference: &str) -> String {
    let mut name = String::with_capacity(PREFIX.len() + reference.len());
    name.push_str(PREFIX);
    name.extend(reference.chars().map(|c| match c {
        '-' | '.' => '_',
        other => other.to_ascii_uppercase(),
    }));
    name
}

/// `TRELLIS_SECRET_*` variables, captured at start, and the tenants whose runs may use them.
/// `Debug` lists the variable names and the tenants only.
pub struct EnvSecrets {
    values: BTreeMap<String, Vec<u8>>,
    tenants: BTreeSet<String>,
}

impl std::fmt::Debug for EnvSecrets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EnvSecrets")
            .field("variables", &self.values.keys().collect::<Vec<_>>())
            .field("tenants", &self.tenants)
            .finish()
    }
}

impl EnvSecrets {
    /// The process environment's `TRELLIS_SECRET_*` variables, for the runs of `tenants` only.
    pub fn from_process(tenants: &[&str]) -> Self {
        Self::from_os_vars(tenants, std::env::vars_os())
    }

    /// The `TRELLIS_SECRET_*` entries of `vars` (tests pass their own), for the runs of
    /// `tenants` only.
    pub fn from_vars<K: Into<String>, V: Into<String>>(
        tenants: &[&str],
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self::from_os_vars(
            tenants,
            vars.into_iter().map(|(key, value)| (OsString::from(key.into()), OsString::from(value.into()))),
        )
    }

    fn from_os_vars(tenants: &[&str], vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let values = vars
            .into_iter()
            .filter_map(|(key, value)| {
                let key = key.into_string().ok()?;
                let value = value.into_string().ok()?;
                (key.starts_with(PREFIX) && key.len() > PREFIX.len()).then(|| (key, value.into_bytes()))
            })
            .collect();
        Self { values, tenants: tenants.iter().map(|tenant| (*tenant).to_owned()).collect() }
    }

    /// Whether `tenant`'s runs may use these variables.
    pub fn serves(&self, tenant: &str) -> bool {
        self.tenants.contains(tenant)
    }

    /// How many variables were captured.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[async_trait]
impl SecretResolver for EnvSecrets {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        // Another tenant's run learns nothing: not even whether the variable is set.
        self.values
            .get(&variable_name(request.reference))
            .filter(|_| self.serves(request.tenant))
            .map(|value| Secret::new(value.clone()))
            .ok_or_else(|| SecretError::NotFound { reference: request.reference.to_owned() })
    }

    fn backend(&self) -> &'static str {
        "env"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_variables() {
        assert_eq!(
            variable_name("openwop-conformance-canary-secret"),
            "TRELLIS_SECRET_OPENWOP_CONFORMANCE_CANARY_SECRET"
        );
        assert_eq!(variable_name("svc.v2_Key"), "TRELLIS_SECRET_SVC_V2_KEY");
    }

    #[tokio::test]
    async fn resolves_only_prefixed_variables() {
        let secrets = EnvSecrets::from_vars(
            &["t"],
            [("TRELLIS_SECRET_API_TOKEN", "tok-1"), ("HOME", "/root"), ("TRELLIS_SECRET_", "x")],
        );
        assert_eq!(secrets.len(), 1);
        let found = secrets.resolve(SecretRequest { tenant: "t", reference: "api-token" }).await.unwrap();
        assert_eq!(found.expose(), b"tok-1");
        let missing = secrets.resolve(SecretRequest { tenant: "t", reference: "home" }).await.unwrap_err();
        assert_eq!(missing.code(), "credential_not_found");
        assert!(!format!("{secrets:?}").contains("tok-1"));
    }

    #[tokio::test]
    async fn only_the_named_tenants_may_use_the_variables() {
        let secrets = EnvSecrets::from_vars(&["default"], [("TRELLIS_SECRET_API_TOKEN", "tok-a")]);
        let ask = |tenant| SecretRequest { tenant, reference: "api-token" };
        assert_eq!(secrets.resolve(ask("default")).await.unwrap().expose(), b"tok-a");
        for other in ["acme", "Default", ""] {
            let refused = secrets.resolve(ask(other)).await.unwrap_err();
            assert_eq!(refused, SecretError::NotFound { reference: "api-token".into() }, "{other:?}: reads as unset");
        }
        let nobody = EnvSecrets::from_vars(&[], [("TRELLIS_SECRET_API_TOKEN", "tok-a")]);
        assert_eq!(nobody.resolve(ask("default")).await.unwrap_err().code(), "credential_not_found");
    }
}
