//! Where the local stack's API keys and secrets come from, by the rules `trellis serve` follows
//! ([`trellis_http::devkeys`]): a keys file of hashed keys, `TRELLIS_API_KEY`, or else a
//! generated development key kept (mode 0600) in [`STATE_DIR`]; and the secret that signs list
//! cursors and callback tokens (the functions' `TRELLIS_CURSOR_SECRET`), kept there too so
//! both survive a restart.

use std::path::Path;

use serde_json::json;
use trellis_http::devkeys::{self, DevKeys, KeyError};
use trellis_http::ApiKey;

/// The directory, under the working directory, of what the local stack keeps between runs.
pub(crate) const STATE_DIR: &str = ".trellis-aws-local";

/// The keys of `keys_file`, plus `env_key` (`TRELLIS_API_KEY`) with every scope; neither:
/// the development key of [`STATE_DIR`]. With the test seams on, the full-access key may use
/// them too.
pub(crate) fn collect(keys_file: Option<&Path>, env_key: Option<&str>, test_seams: bool) -> Result<DevKeys, KeyError> {
    devkeys::collect(keys_file, env_key, || devkeys::dev_key(Path::new(STATE_DIR)), test_seams)
}

/// `keys` as the `api` function's `TRELLIS_API_KEYS` (a JSON array of hashed keys).
pub(crate) fn to_setting(keys: &[ApiKey]) -> String {
    let entries: Vec<_> = keys
        .iter()
        .map(|key| json!({"label": key.label, "sha256": hex::encode(key.hash), "tenant": key.tenant, "scopes": key.scopes}))
        .collect();
    serde_json::Value::Array(entries).to_string()
}

/// The secret that signs list cursors and callback tokens.
pub(crate) fn cursor_secret() -> Result<String, KeyError> {
    devkeys::persisted_secret(&Path::new(STATE_DIR).join(devkeys::CURSOR_SECRET_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_the_key_list_the_api_function_parses() {
        let keys = vec![devkeys::full_access_key("dev-key", "trl_x")];
        let parsed = ApiKey::parse_list(&to_setting(&keys)).expect("a key list");
        assert_eq!(parsed.len(), 1);
        assert_eq!((parsed[0].label.as_str(), parsed[0].hash), ("dev-key", ApiKey::hash_of("trl_x")));
        assert_eq!((parsed[0].tenant.as_str(), parsed[0].scopes.as_slice()), ("default", ["*".to_owned()].as_slice()));
    }
}
