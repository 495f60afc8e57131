//! Where API keys come from: `TRELLIS_API_KEY`, a keys file of hashed keys, or a generated
//! development key persisted (mode 0600) in the data directory. Keys are held hashed.

use std::fs;
use std::io::Write;
use std::path::Path;

use trellis_http::ApiKey;

/// The tenant of keys that do not name one.
pub const DEFAULT_TENANT: &str = "default";
/// The file, inside the data directory, that keeps the generated development key.
pub const DEV_KEY_FILE: &str = "dev-api-key";

/// Why keys could not be loaded.
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
    /// The development key could not be stored.
    #[error("cannot store the development key in {path}: {source}")]
    Persist {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Reads a keys file (a JSON array of `{"label", "sha256", "tenant", "scopes"}`).
pub fn load_keys_file(path: &Path) -> Result<Vec<ApiKey>, KeyError> {
    let shown = path.display().to_string();
    let text = fs::read_to_string(path).map_err(|source| KeyError::Read { path: shown.clone(), source })?;
    ApiKey::parse_list(&text).map_err(|error| KeyError::Invalid { path: shown, message: error.0 })
}

/// A key with every scope for the default tenant.
pub fn full_access_key(label: &str, secret: &str) -> ApiKey {
    ApiKey {
        label: label.to_owned(),
        hash: ApiKey::hash_of(secret),
        tenant: DEFAULT_TENANT.to_owned(),
        scopes: vec!["*".to_owned()],
    }
}

/// A fresh random key, `trl_` followed by 64 hex characters.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    format!("trl_{}", hex::encode(bytes))
}

/// The development key kept in `data_dir`, created (mode 0600) on first use.
pub fn dev_key(data_dir: &Path) -> Result<String, KeyError> {
    persisted_secret(&data_dir.join(DEV_KEY_FILE), generate_key)
}

/// The file, inside the data directory, that keeps the secret signing list cursors.
pub const CURSOR_SECRET_FILE: &str = "cursor-secret";

/// The secret that signs list cursors: kept in `data_dir` (so cursors survive a restart), or
/// fresh for an in-memory host.
pub fn cursor_secret(data_dir: Option<&Path>) -> Result<[u8; 32], KeyError> {
    let text = match data_dir {
        Some(dir) => persisted_secret(&dir.join(CURSOR_SECRET_FILE), generate_key)?,
        None => generate_key(),
    };
    Ok(ApiKey::hash_of(&text))
}

/// Reads a secret from `path`, or creates it there (mode 0600) with `make`.
fn persisted_secret(path: &Path, make: fn() -> String) -> Result<String, KeyError> {
    if let Ok(existing) = fs::read_to_string(path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(existing.to_owned());
        }
    }
    let key = make();
    let shown = path.display().to_string();
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|source| KeyError::Persist { path: shown.clone(), source })?;
    file.write_all(key.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| KeyError::Persist { path: shown, source })?;
    Ok(key)
}

/// The key given on standard input, trimmed: one line after a prompt when standard input is
/// a terminal, else all of it. `None` when nothing (or only blanks) could be read.
pub fn read_key_from_stdin() -> Option<String> {
    use std::io::{IsTerminal, Read};
    let stdin = std::io::stdin();
    let mut key = String::new();
    let read = if stdin.is_terminal() {
        eprint!("API key to hash (one line): ");
        let _ = std::io::stderr().flush();
        stdin.read_line(&mut key).map(drop)
    } else {
        stdin.lock().read_to_string(&mut key).map(drop)
    };
    let key = key.trim();
    (read.is_ok() && !key.is_empty()).then(|| key.to_owned())
}
