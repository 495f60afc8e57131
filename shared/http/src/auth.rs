//! Bearer API keys. Keys are held only as SHA-256 hashes, compared in constant time; each is
//! bound to one tenant and a set of scopes. Authentication runs before any route looks a
//! resource up, so a missing key never reveals whether something exists.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use trellis_core::run::Principal;

use crate::error::ApiError;
use crate::AppState;

/// A permission a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `POST /v1/runs`.
    RunsCreate,
    /// Reading runs and their events.
    RunsRead,
    /// Cancelling runs.
    RunsCancel,
    /// Deleting and pruning runs (host extension).
    RunsDelete,
    /// Reading workflow definitions.
    ManifestRead,
    /// Registering workflow definitions (host extension).
    WorkflowsWrite,
    /// Resolving interrupts on the run-scoped surface.
    ApprovalsRespond,
    /// Registering, pausing and deleting webhook and trigger subscriptions and schedules
    /// (host extension).
    IntegrationsWrite,
    /// The conformance test seams, and scripted supervisor plans in any workflow. Never
    /// granted by `*`: it must be named.
    TestSeams,
}

impl Scope {
    /// The scope's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunsCreate => "runs:create",
            Self::RunsRead => "runs:read",
            Self::RunsCancel => "runs:cancel",
            Self::RunsDelete => "runs:delete",
            Self::ManifestRead => "manifest:read",
            Self::WorkflowsWrite => "workflows:write",
            Self::ApprovalsRespond => "approvals:respond",
            Self::IntegrationsWrite => "integrations:write",
            Self::TestSeams => "test:seams",
        }
    }

    /// Every scope this host checks.
    pub const ALL: [Scope; 9] = [
        Self::RunsCreate,
        Self::RunsRead,
        Self::RunsCancel,
        Self::RunsDelete,
        Self::ManifestRead,
        Self::WorkflowsWrite,
        Self::ApprovalsRespond,
        Self::IntegrationsWrite,
        Self::TestSeams,
    ];
}

/// One API key as stored: its hash, tenant and scopes.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// A label for logs and the run's recorded principal.
    pub label: String,
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    /// The tenant the key acts for.
    pub tenant: String,
    /// Granted scopes (`*` grants all).
    pub scopes: Vec<String>,
}

impl ApiKey {
    /// SHA-256 of a presented key.
    pub fn hash_of(secret: &str) -> [u8; 32] {
        Sha256::digest(secret.as_bytes()).into()
    }

    fn grants(&self, scope: Scope) -> bool {
        self.scopes.iter().any(|granted| (granted == "*" && scope != Scope::TestSeams) || granted == scope.as_str())
    }
}

/// Why a list of key entries was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct KeyListError(pub String);

/// One entry of a key list: `{"label", "sha256", "tenant", "scopes"}`, `sha256` being the
/// hex SHA-256 of the key.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    label: String,
    sha256: String,
    tenant: String,
    scopes: Vec<String>,
}

impl ApiKey {
    /// Parses a JSON array of key entries (the keys file of `trellis serve`, or the
    /// `TRELLIS_API_KEYS` setting of the serverless API).
    pub fn parse_list(text: &str) -> Result<Vec<ApiKey>, KeyListError> {
        let entries: Vec<KeyEntry> = serde_json::from_str(text).map_err(|error| KeyListError(error.to_string()))?;
        entries
            .into_iter()
            .map(|entry| {
                let bytes = hex::decode(entry.sha256.trim()).ok().filter(|bytes| bytes.len() == 32);
                let hash: [u8; 32] = bytes
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| KeyListError(format!("key `{}`: sha256 must be 64 hex characters", entry.label)))?;
                if entry.tenant.is_empty() {
                    return Err(KeyListError(format!("key `{}` has no tenant", entry.label)));
                }
                Ok(ApiKey { label: entry.label, hash, tenant: entry.tenant, scopes: entry.scopes })
            })
            .collect()
    }
}

/// Every accepted key.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    keys: Vec<ApiKey>,
}

impl KeyRing {
    /// A ring of `keys`.
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Self { keys }
    }

    /// The key whose hash matches `secret`. Every stored hash is compared, in constant time.
    pub fn find(&self, secret: &str) -> Option<&ApiKey> {
        let presented = ApiKey::hash_of(secret);
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.hash.ct_eq(&presented)) {
                found = Some(key);
            }
        }
        found
    }
}

/// The authenticated caller of a `/v1` route.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who they are, as recorded on runs.
    pub principal: Principal,
    key: ApiKey,
}

impl Caller {
    /// `403 forbidden` unless the key grants `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.key.grants(scope) {
            Ok(())
        } else {
            Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", "the API key lacks the scope this route needs")
                .with_details(json!({ "scopeRequired": scope.as_str() })))
        }
    }

    /// The caller's tenant.
    pub fn tenant(&self) -> &str {
        &self.principal.tenant
    }
}

/// Authenticates `Authorization: Bearer <key>` from request headers.
pub fn authenticate(parts: &Parts, keys: &KeyRing) -> Result<Caller, ApiError> {
    let header = parts.headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    let token = header
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
        .ok_or_else(ApiError::unauthenticated)?;
    let key = keys.find(token).ok_or_else(ApiError::unauthenticated)?;
    Ok(Caller {
        principal: Principal {
            tenant: key.tenant.clone(),
            subject: key.label.clone(),
            key_class: "api-key".to_owned(),
            test_scope: key.grants(Scope::TestSeams),
        },
        key: key.clone(),
    })
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        authenticate(parts, &state.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_by_hash_and_checks_scopes() {
        let ring = KeyRing::new(vec![ApiKey {
            label: "reader".into(),
            hash: ApiKey::hash_of("s3cret"),
            tenant: "acme".into(),
            scopes: vec!["runs:read".into()],
        }]);
        assert!(ring.find("wrong").is_none());
        let key = ring.find("s3cret").unwrap();
        assert!(key.grants(Scope::RunsRead));
        assert!(!key.grants(Scope::RunsCancel));
    }
}
