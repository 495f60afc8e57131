//! Where a development host's API keys come from, shared by `trellis serve` and
//! `trellis-aws-local`: a keys file of hashed keys, `TRELLIS_API_KEY`, or else a generated
//! development key persisted (mode 0600) in the host's state directory; and the secrets kept
//! the same way (the one signing list cursors and callback tokens). Keys are held hashed.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::{ApiKey, Scope};

/// The tenant of the full-access key (`TRELLIS_API_KEY` or the development key).
pub const DEFAULT_TENANT: &str = "default";
/// The file, inside a host's state directory, that keeps the generated development key.
pub const DEV_KEY_FILE: &str = "dev-api-key";
/// The file, inside a host's state directory, that keeps the secret signing list cursors.
pub const CURSOR_SECRET_FILE: &str = "cursor-secret";
/// The label of the key given in `TRELLIS_API_KEY`.
pub const ENV_KEY_LABEL: &str = "env:TRELLIS_API_KEY";
/// The label of the generated development key.
pub const DEV_KEY_LABEL: &str = "dev-key";

/// Why keys or secrets could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The keys file could not be read.
    #[error("cannot read keys file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The keys file is not a JSON array of key entries.
    #[error("keys file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A generated secret (the development key, the cursor secret) could not be stored.
    #[error("cannot store a secret in {path}: {source}")]
    Persist {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// The keys a development host accepts, and its generated development key when it has one
/// (to print at start).
#[derive(Debug, Clone)]
pub struct DevKeys {
    /// Every accepted key.
    pub keys: Vec<ApiKey>,
    /// The generated development key, when it is in use.
    pub dev_key: Option<String>,
}

/// Reads a keys file (a JSON array of `{"label", "sha256", "tenant", "scopes"}`).
pub fn load_keys_file(path: &Path) -> Result<Vec<ApiKey>, KeyError> {
    let shown = path.display().to_string();
    let text = fs::read_to_string(path).map_err(|source| KeyError::Read { path: shown.clone(), source })?;
    ApiKey::parse_list(&text).map_err(|error| KeyError::Invalid { path: shown, message: error.0 })
}

/// A key with every scope for [`DEFAULT_TENANT`].
pub fn full_access_key(label: &str, secret: &str) -> ApiKey {
    ApiKey {
        label: label.to_owned(),
        hash: ApiKey::hash_of(secret),
        tenant: DEFAULT_TENANT.to_owned(),
        scopes: vec!["*".to_owned()],
    }
}

/// A fresh random key (or secret), `trl_` followed by 64 hex characters.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    format!("trl_{}", hex::encode(bytes))
}

/// The development key kept in `dir`, created (mode 0600) on first use.
pub fn dev_key(dir: &Path) -> Result<String, KeyError> {
    persisted_secret(&dir.join(DEV_KEY_FILE))
}

/// The keys of `keys_file`, plus `env_key` (`TRELLIS_API_KEY`, trimmed) with every scope;
/// with neither, the development key `dev_secret` gives. With `test_seams`, the full-access
/// key (`TRELLIS_API_KEY`'s or the development key) may use the test seams too.
pub fn collect(
    keys_file: Option<&Path>,
    env_key: Option<&str>,
    dev_secret: impl FnOnce() -> Result<String, KeyError>,
    test_seams: bool,
) -> Result<DevKeys, KeyError> {
    let mut keys = match keys_file {
        Some(path) => load_keys_file(path)?,
        None => Vec::new(),
    };
    let mut dev_key = None;
    let full_access = match env_key.map(str::trim).filter(|key| !key.is_empty()) {
        Some(secret) => Some(full_access_key(ENV_KEY_LABEL, secret)),
        None if keys.is_empty() => {
            let secret = dev_secret()?;
            let key = full_access_key(DEV_KEY_LABEL, &secret);
            dev_key = Some(secret);
            Some(key)
        }
        None => None,
    };
    if let Some(mut key) = full_access {
        if test_seams {
            key.scopes.push(Scope::TestSeams.as_str().to_owned());
        }
        keys.push(key);
    }
    Ok(DevKeys { keys, dev_key })
}

/// The secret kept in `path`, created (mode 0600, its directory 0700 when missing) with a
/// [`generate_key`] on first use.
pub fn persisted_secret(path: &Path) -> Result<String, KeyError> {
    if let Ok(existing) = fs::read_to_string(path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(existing.to_owned());
        }
    }
    let shown = path.display().to_string();
    let persist = |source| KeyError::Persist { path: shown.clone(), source };
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(dir).map_err(persist)?;
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let secret = generate_key();
    let mut file = options.open(path).map_err(persist)?;
    file.write_all(secret.as_bytes()).and_then(|()| file.sync_all()).map_err(persist)?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_trl_and_64_hex_characters() {
        let key = generate_key();
        let hex = key.strip_prefix("trl_").expect("the trl_ prefix");
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_ne!(generate_key(), key);
    }

    #[test]
    fn a_persisted_secret_is_created_once_in_a_private_file_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/dev-api-key");
        let first = persisted_secret(&path).unwrap();
        assert_eq!(persisted_secret(&path).unwrap(), first);
        assert_eq!(fs::read_to_string(&path).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        assert_eq!(dev_key(&dir.path().join("state")).unwrap(), first, "the development key's file");
    }

    #[test]
    fn the_full_access_key_is_the_env_key_else_the_dev_key_unless_a_keys_file_has_keys() {
        let none = || -> Result<String, KeyError> { panic!("no development key wanted") };
        let env = collect(None, Some(" k1 "), none, false).unwrap();
        assert_eq!((env.keys.len(), env.dev_key.as_deref()), (1, None));
        assert_eq!(env.keys[0].label, ENV_KEY_LABEL);
        assert_eq!(env.keys[0].hash, ApiKey::hash_of("k1"));
        assert_eq!(env.keys[0].scopes, ["*"]);

        let dev = collect(None, Some("  "), || Ok("trl_dev".to_owned()), true).unwrap();
        assert_eq!(dev.dev_key.as_deref(), Some("trl_dev"));
        assert_eq!(dev.keys[0].label, DEV_KEY_LABEL);
        assert_eq!(dev.keys[0].tenant, DEFAULT_TENANT);
        assert_eq!(dev.keys[0].scopes, ["*", Scope::TestSeams.as_str()]);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys.json");
        let hash = hex::encode(ApiKey::hash_of("ops"));
        fs::write(
            &file,
            format!(r#"[{{"label": "ops", "sha256": "{hash}", "tenant": "t", "scopes": ["runs:read"]}}]"#),
        )
        .unwrap();
        let filed = collect(Some(&file), None, none, true).unwrap();
        assert_eq!((filed.keys.len(), filed.dev_key), (1, None));
        assert_eq!(filed.keys[0].scopes, ["runs:read"], "a keys file's keys get no test seams");
        let both = collect(Some(&file), Some("k1"), none, false).unwrap();
        assert_eq!(both.keys.iter().map(|key| key.label.as_str()).collect::<Vec<_>>(), ["ops", ENV_KEY_LABEL]);
    }

    #[test]
    fn an_unreadable_or_invalid_keys_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = collect(Some(&dir.path().join("missing.json")), Some("k"), || Ok(String::new()), false);
        assert!(matches!(missing, Err(KeyError::Read { .. })));
        let file = dir.path().join("bad.json");
        fs::write(&file, "{}").unwrap();
        assert!(matches!(load_keys_file(&file), Err(KeyError::Invalid { .. })));
    }
}
