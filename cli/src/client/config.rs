//! Where a client command finds its host and key: flag > environment (clap merges the two
//! into [`GlobalArgs`]) > the config file (`--config` / `TRELLIS_CONFIG`, else
//! `$XDG_CONFIG_HOME/trellis/config.json`, else `$HOME/.config/trellis/config.json`) > the
//! development key file `trellis serve` writes (`$TRELLIS_DATA_DIR/dev-api-key`, default
//! `trellis-data/dev-api-key`).
//!
//! A config file named explicitly must exist; the default one is skipped when absent. A
//! present file that is not a JSON object of optional strings `url` and `key` is an error
//! naming the file and the field.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::exit::ClientError;
use crate::args::GlobalArgs;

/// The URL used when none is configured anywhere.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The resolved host and key of a client command. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The base URL without a trailing `/` (its path, an API Gateway stage, kept).
    pub url: String,
    /// The bearer key, if one was found.
    pub key: Option<String>,
    /// A PEM file of extra trusted root certificates (`--ca-cert` / `TRELLIS_CA_CERT`).
    pub ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Target")
            .field("url", &self.url)
            .field("key", &self.key.as_ref().map(|_| "<hidden>"))
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

/// The `{url, key}` of a config file.
#[derive(Debug, Default)]
struct FileConfig {
    url: Option<String>,
    key: Option<String>,
}

/// Resolves the target of `global` (see the module docs for the order).
pub fn resolve(global: &GlobalArgs) -> Result<Target, ClientError> {
    let file = match &global.config {
        Some(path) => read_config(path)?,
        None => match default_config_path() {
            Some(path) if path.exists() => read_config(&path)?,
            _ => FileConfig::default(),
        },
    };
    let url = global.url.clone().or(file.url).unwrap_or_else(|| DEFAULT_URL.to_owned());
    let url = normalise_url(&url)?;
    let key = global.key.clone().filter(|key| !key.is_empty()).or(file.key).or_else(dev_key);
    Ok(Target { url, key, ca_cert: global.ca_cert.clone() })
}

/// Checks the scheme and drops trailing slashes.
fn normalise_url(url: &str) -> Result<String, ClientError> {
    let trimmed = url.trim().trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) || trimmed.contains(['?', '#']) {
        return Err(ClientError::Input(format!("--url must be an http:// or https:// URL without a query: {url}")));
    }
    Ok(trimmed.to_owned())
}

fn default_config_path() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    non_empty("XDG_CONFIG_HOME")
        .or_else(|| non_empty("HOME").map(|home| home.join(".config")))
        .map(|dir| dir.join("trellis").join("config.json"))
}

fn read_config(path: &Path) -> Result<FileConfig, ClientError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|error| ClientError::Input(format!("config file {shown}: cannot read it: {error}")))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|error| ClientError::Input(format!("config file {shown}: not JSON: {error}")))?;
    let Value::Object(fields) = value else {
        return Err(ClientError::Input(format!("config file {shown}: must be a JSON object {{\"url\", \"key\"}}")));
    };
    let field = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ClientError::Input(format!("config file {shown}: field \"{name}\" must be a string"))),
    };
    Ok(FileConfig { url: field("url")?, key: field("key")? })
}

/// The development key `trellis serve` keeps in its data directory, if there is one (read
/// again by `ping --wait` once the host answers: a host started just before may not have
/// written it when the command began).
pub fn dev_key() -> Option<String> {
    let dir = std::env::var_os("TRELLIS_DATA_DIR")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("trellis-data"));
    let key = std::fs::read_to_string(dir.join("dev-api-key")).ok()?;
    Some(key.trim().to_owned()).filter(|key| !key.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_their_path_and_lose_trailing_slashes() {
        assert_eq!(normalise_url("http://127.0.0.1:8080/v/").unwrap(), "http://127.0.0.1:8080/v");
        assert_eq!(normalise_url("https://abc.example/").unwrap(), "https://abc.example");
        assert!(normalise_url("ftp://x").is_err());
    }
}
