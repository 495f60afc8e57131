//! Where the local stack's API keys and secrets come from, as `trellis serve` does it: a keys
//! file of hashed keys, `TRELLIS_API_KEY`, or else a generated development key kept (mode
//! 0600) in [`STATE_DIR`]; and the secret that signs list cursors and callback tokens (the
//! functions' `TRELLIS_CURSOR_SECRET`), kept there too so both survive a restart.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;
use trellis_http::ApiKey;

/// The directory, under the working directory, of what the local stack keeps between runs.
pub(crate) const STATE_DIR: &str = ".trellis-aws-local";
/// The file of the generated development key.
const DEV_KEY_FILE: &str = "dev-api-key";
/// The file of the cursor and callback secret.
const CURSOR_SECRET_FILE: &str = "cursor-secret";

/// Why keys or secrets could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    /// The keys file could not be read.
    #[error("cannot read keys file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// The keys file is not a JSON array of key entries.
    #[error("keys file {path} is invalid: {message}")]
    Invalid { path: String, message: String },
    /// A generated secret could not be stored.
    #[error("cannot store a secret in {path}: {source}")]
    Persist { path: String, source: std::io::Error },
}

/// The keys the API accepts, and the generated development key when there is one to print.
pub(crate) struct Keys {
    pub(crate) keys: Vec<ApiKey>,
    pub(crate) dev_key: Option<String>,
}

impl Keys {
    /// The keys as the `api` function's `TRELLIS_API_KEYS` (a JSON array of hashed keys).
    pub(crate) fn to_setting(&self) -> String {
        let entries: Vec<_> = self
            .keys
            .iter()
            .map(|key| json!({"label": key.label, "sha256": hex::encode(key.hash), "tenant": key.tenant, "scopes": key.scopes}))
            .collect();
        serde_json::Value::Array(entries).to_string()
    }
}

/// The keys of `keys_file`, plus `env_key` (`TRELLIS_API_KEY`) with every scope; neither:
/// the development key. With the test seams on, the full-access key may use them too.
pub(crate) fn collect(keys_file: Option<&Path>, env_key: Option<&str>, test_seams: bool) -> Result<Keys, KeyError> {
    let mut keys = Vec::new();
    let mut dev_key = None;
    if let Some(path) = keys_file {
        let shown = path.display().to_string();
        let text = fs::read_to_string(path).map_err(|source| KeyError::Read { path: shown.clone(), source })?;
        keys.extend(ApiKey::parse_list(&text).map_err(|error| KeyError::Invalid { path: shown, message: error.0 })?);
    }
    let mut full_access = None;
    match env_key.filter(|key| !key.trim().is_empty()) {
        Some(secret) => full_access = Some(("env:TRELLIS_API_KEY", secret.trim().to_owned())),
        None if keys.is_empty() => {
            let secret = persisted_secret(DEV_KEY_FILE)?;
            dev_key = Some(secret.clone());
            full_access = Some(("dev-key", secret));
        }
        None => {}
    }
    if let Some((label, secret)) = full_access {
        let mut scopes = vec!["*".to_owned()];
        if test_seams {
            scopes.push(trellis_http::Scope::TestSeams.as_str().to_owned());
        }
        keys.push(ApiKey {
            label: label.to_owned(),
            hash: ApiKey::hash_of(&secret),
            tenant: "default".to_owned(),
            scopes,
        });
    }
    Ok(Keys { keys, dev_key })
}

/// The secret that signs list cursors and callback tokens.
pub(crate) fn cursor_secret() -> Result<String, KeyError> {
    persisted_secret(CURSOR_SECRET_FILE)
}

/// A fresh random secret, `trl_` followed by 64 hex characters.
fn generate() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    format!("trl_{}", hex::encode(bytes))
}

/// The secret kept in [`STATE_DIR`]`/file`, created (mode 0600) on first use.
fn persisted_secret(file: &str) -> Result<String, KeyError> {
    let path = PathBuf::from(STATE_DIR).join(file);
    if let Ok(existing) = fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(existing.to_owned());
        }
    }
    let shown = path.display().to_string();
    let persist = |source| KeyError::Persist { path: shown.clone(), source };
    let mut directory = fs::DirBuilder::new();
    directory.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        directory.mode(0o700);
    }
    directory.create(STATE_DIR).map_err(persist)?;
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let secret = generate();
    let mut opened = options.open(&path).map_err(persist)?;
    opened.write_all(secret.as_bytes()).and_then(|()| opened.sync_all()).map_err(persist)?;
    Ok(secret)
}
