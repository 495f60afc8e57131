//! Where API keys come from: `TRELLIS_API_KEY`, a keys file of hashed keys, or a generated
//! development key persisted (mode 0600) in the data directory — the development hosts' shared
//! rules of [`trellis_http::devkeys`] — and the key `trellis hash-key` reads. Keys are held
//! hashed.

use std::io::Write;
use std::path::Path;

use trellis_http::ApiKey;

pub use trellis_http::devkeys::{
    collect, dev_key, full_access_key, generate_key, load_keys_file, persisted_secret, DevKeys, KeyError,
    CURSOR_SECRET_FILE, DEFAULT_TENANT, DEV_KEY_FILE,
};

/// The secret that signs list cursors: kept in `data_dir` (so cursors survive a restart), or
/// fresh for an in-memory host.
pub fn cursor_secret(data_dir: Option<&Path>) -> Result<[u8; 32], KeyError> {
    let text = match data_dir {
        Some(dir) => persisted_secret(&dir.join(CURSOR_SECRET_FILE))?,
        None => generate_key(),
    };
    Ok(ApiKey::hash_of(&text))
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
