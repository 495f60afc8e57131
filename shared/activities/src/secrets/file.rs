//! Secrets from a JSON file that only its owner may read:
//!
//! ```json
//! { "secrets": {
//!     "github-token": "ghp_…",                                   // any tenant's runs
//!     "billing-key": { "value": "sk_…", "tenants": ["acme"] }    // only tenant acme's runs
//! } }
//! ```
//!
//! The file is read once, when the host starts (restart to rotate). It is refused when its
//! mode lets the group or others read or write it (anything but `0600` / `0400`), when it is
//! not that shape, or when a key is not a valid reference. A secret restricted to other
//! tenants answers `credential_not_found`, exactly as a missing one does.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use serde_json::Value;
use trellis_core::secrets::{check_ref, Secret, SecretError, SecretRequest, SecretResolver};

/// Why the secrets file was refused. Messages name the file and the entry, never a value.
#[derive(Debug, thiserror::Error)]
pub enum FileSecretsError {
    /// It could not be read.
    #[error("cannot read the secrets file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its mode lets others read it.
    #[error("the secrets file {path} has mode {mode:o}: group and others must have no access (chmod 600 {path})")]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// It is not the documented shape.
    #[error("the secrets file {path} is invalid: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong (never a value).
        reason: String,
    },
}

struct Entry {
    value: Vec<u8>,
    /// `None`: every tenant.
    tenants: Option<Vec<String>>,
}

/// The secrets of one file. `Debug` lists the references only.
pub struct FileSecrets {
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for FileSecrets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("FileSecrets").field("references", &self.entries.keys().collect::<Vec<_>>()).finish()
    }
}

impl FileSecrets {
    /// Reads and checks `path` (blocking file I/O: call it at start, or off the runtime).
    pub fn load(path: &Path) -> Result<Self, FileSecretsError> {
        let shown = path.display().to_string();
        let read = |source| FileSecretsError::Read { path: shown.clone(), source };
        let metadata = std::fs::metadata(path).map_err(read)?;
        check_mode(&shown, &metadata)?;
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::parse(&shown, &text)
    }

    /// Parses the file's text (`path` only names it in errors).
    pub fn parse(path: &str, text: &str) -> Result<Self, FileSecretsError> {
        let invalid = |reason: String| FileSecretsError::Invalid { path: path.to_owned(), reason };
        // serde_json's error names a line and column, never the text around it.
        let document: Value = serde_json::from_str(text).map_err(|error| invalid(format!("not JSON ({error})")))?;
        let Some(secrets) = document.get("secrets").and_then(Value::as_object) else {
            return Err(invalid("expected an object {\"secrets\": {\"<reference>\": …}}".to_owned()));
        };
        if let Some(extra) = document.as_object().and_then(|fields| fields.keys().find(|key| *key != "secrets")) {
            return Err(invalid(format!("unknown top-level field `{extra}` (only `secrets`)")));
        }
        let mut entries = BTreeMap::new();
        for (reference, entry) in secrets {
            check_ref(reference).map_err(|reason| invalid(format!("secrets.{reference}: the reference {reason}")))?;
            let entry = match entry {
                Value::String(value) => Entry { value: value.clone().into_bytes(), tenants: None },
                Value::Object(fields) => {
                    if let Some(extra) = fields.keys().find(|key| !matches!(key.as_str(), "value" | "tenants")) {
                        return Err(invalid(format!("secrets.{reference}.{extra} is not a field (value, tenants)")));
                    }
                    let Some(Value::String(value)) = fields.get("value") else {
                        return Err(invalid(format!("secrets.{reference}.value must be a string")));
                    };
                    let tenants = match fields.get("tenants") {
                        None => None,
                        Some(Value::Array(items)) if !items.is_empty() => Some(
                            items
                                .iter()
                                .map(|item| item.as_str().map(str::to_owned))
                                .collect::<Option<Vec<_>>>()
                                .ok_or_else(|| invalid(format!("secrets.{reference}.tenants must list strings")))?,
                        ),
                        Some(_) => {
                            return Err(invalid(format!("secrets.{reference}.tenants must be a non-empty array")))
                        }
                    };
                    Entry { value: value.clone().into_bytes(), tenants }
                }
                _ => {
                    return Err(invalid(format!(
                        "secrets.{reference} must be a string or {{\"value\": string, \"tenants\"?: [string]}}"
                    )))
                }
            };
            entries.insert(reference.clone(), entry);
        }
        Ok(Self { entries })
    }

    /// How many secrets the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(unix)]
fn check_mode(path: &str, metadata: &std::fs::Metadata) -> Result<(), FileSecretsError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FileSecretsError::Permissions { path: path.to_owned(), mode });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_path: &str, _metadata: &std::fs::Metadata) -> Result<(), FileSecretsError> {
    Ok(())
}

#[async_trait]
impl SecretResolver for FileSecrets {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        self.entries
            .get(request.reference)
            .filter(|entry| entry.tenants.as_ref().is_none_or(|tenants| tenants.iter().any(|t| t == request.tenant)))
            .map(|entry| Secret::new(entry.value.clone()))
            .ok_or_else(|| SecretError::NotFound { reference: request.reference.to_owned() })
    }

    fn backend(&self) -> &'static str {
        "file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.json");
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        (dir, path)
    }

    const DOC: &str = r#"{"secrets": {"open": "v-open", "acme-only": {"value": "v-acme", "tenants": ["acme"]}}}"#;

    #[tokio::test]
    async fn resolves_and_restricts_by_tenant() {
        let (_dir, path) = write(DOC, 0o600);
        let secrets = FileSecrets::load(&path).unwrap();
        let ask = |tenant, reference| SecretRequest { tenant, reference };
        assert_eq!(secrets.resolve(ask("default", "open")).await.unwrap().expose(), b"v-open");
        assert_eq!(secrets.resolve(ask("acme", "acme-only")).await.unwrap().expose(), b"v-acme");
        let hidden = secrets.resolve(ask("default", "acme-only")).await.unwrap_err();
        assert_eq!(hidden, SecretError::NotFound { reference: "acme-only".into() }, "restricted reads as missing");
        assert_eq!(secrets.resolve(ask("acme", "nope")).await.unwrap_err().code(), "credential_not_found");
        assert!(!format!("{secrets:?}").contains("v-open"));
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_can_read_is_refused() {
        for mode in [0o644, 0o640, 0o604, 0o660] {
            let (_dir, path) = write(DOC, mode);
            let error = FileSecrets::load(&path).unwrap_err();
            assert!(matches!(error, FileSecretsError::Permissions { .. }), "{mode:o}: {error}");
            assert!(error.to_string().contains("chmod 600"), "{error}");
        }
        let (_dir, path) = write(DOC, 0o400);
        assert_eq!(FileSecrets::load(&path).unwrap().len(), 2);
    }

    #[test]
    fn malformed_files_are_refused_without_echoing_values() {
        let cases = [
            r#"{"secrets": {"bad/ref": "v-secret"}}"#,
            r#"{"secrets": {"k": 5}}"#,
            r#"{"secrets": {"k": {"value": "v-secret", "tenants": []}}}"#,
            r#"{"secrets": {"k": {"value": "v-secret", "other": 1}}}"#,
            r#"{"secret": {}}"#,
            r#"{"secrets": {"k": "v-secret"}, "x": 1}"#,
            r#"{"secrets": {"k": "v-secret""#,
        ];
        for text in cases {
            let error = FileSecrets::parse("s.json", text).err().unwrap_or_else(|| panic!("{text} accepted"));
            assert!(!error.to_string().contains("v-secret"), "{error}");
        }
    }
}
