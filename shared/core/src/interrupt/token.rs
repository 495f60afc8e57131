//! Interrupt tokens: `base64url(claims JSON) "." base64url(HMAC-SHA256(key, claims JSON))`.
//!
//! Claims are `{runId, nodeId, interruptId, expiresAt, intent: "resolve"}` (`expiresAt` in
//! Unix milliseconds). Tokens are minted when a snapshot or an inspection shows the
//! interrupt, so nothing about them is stored: the key is derived from the host secret
//! (which persists across restarts), the interrupt id binds a token to one occurrence, and
//! the run's state says whether that occurrence can still be resolved. MACs are compared in
//! constant time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::timefmt::Millis;

/// Longest token accepted before it is called malformed.
const MAX_TOKEN_LENGTH: usize = 2048;
/// The label the token key is derived under.
const KEY_LABEL: &[u8] = b"trellis interrupt token v1";

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenClaims {
    /// The run.
    pub run_id: String,
    /// The suspended node.
    pub node_id: String,
    /// The occurrence.
    pub interrupt_id: String,
    /// Expiry, Unix milliseconds.
    pub expires_at: Millis,
    /// Always `resolve` (a resolving token may also inspect).
    pub intent: String,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not shaped like a token at all (`400 validation_error`).
    #[error("the interrupt token is malformed")]
    Malformed,
    /// Shaped like one, but not one this host signed (`404 interrupt_not_found`).
    #[error("no interrupt matches this token")]
    Unknown,
}

/// Signs and verifies tokens with a key derived from the host secret.
#[derive(Clone)]
pub struct TokenSigner {
    key: [u8; 32],
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner(..)")
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8]) -> HmacSha256 {
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes keys of any length")
}

impl TokenSigner {
    /// A signer whose key is derived from `host_secret`.
    pub fn new(host_secret: &[u8]) -> Self {
        let mut derive = mac(host_secret);
        derive.update(KEY_LABEL);
        Self { key: derive.finalize().into_bytes().into() }
    }

    /// A signed token for `claims`.
    pub fn sign(&self, claims: &TokenClaims) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        let mut tag = mac(&self.key);
        tag.update(&payload);
        format!("{}.{}", URL_SAFE_NO_PAD.encode(&payload), URL_SAFE_NO_PAD.encode(tag.finalize().into_bytes()))
    }

    /// The claims of a token this signer made (expiry is the caller's to check).
    pub fn verify(&self, token: &str) -> Result<TokenClaims, TokenError> {
        let well_formed = !token.is_empty()
            && token.len() <= MAX_TOKEN_LENGTH
            && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !well_formed {
            return Err(TokenError::Malformed);
        }
        let (payload, tag) = token.split_once('.').ok_or(TokenError::Unknown)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| TokenError::Unknown)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| TokenError::Unknown)?;
        let mut check = mac(&self.key);
        check.update(&payload);
        check.verify_slice(&tag).map_err(|_| TokenError::Unknown)?;
        serde_json::from_slice(&payload).map_err(|_| TokenError::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            run_id: "run-1".into(),
            node_id: "gate".into(),
            interrupt_id: "int-1".into(),
            expires_at: 42,
            intent: "resolve".into(),
        }
    }

    #[test]
    fn a_token_verifies_with_its_key_only() {
        let signer = TokenSigner::new(b"secret-one");
        let token = signer.sign(&claims());
        assert_eq!(signer.verify(&token), Ok(claims()));
        assert_eq!(TokenSigner::new(b"secret-two").verify(&token), Err(TokenError::Unknown));
    }

    #[test]
    fn tampering_and_garbage_are_told_apart() {
        let signer = TokenSigner::new(b"secret");
        let token = signer.sign(&claims());
        let (payload, tag) = token.split_once('.').unwrap();
        let forged = TokenClaims { node_id: "other".into(), ..claims() };
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(signer.verify(&format!("{forged_payload}.{tag}")), Err(TokenError::Unknown));
        assert_eq!(signer.verify(&format!("{payload}.")), Err(TokenError::Unknown));
        assert_eq!(signer.verify("tok_0123456789abcdef"), Err(TokenError::Unknown));
        for garbage in ["", "not a token", "a/b", "%%%"] {
            assert_eq!(signer.verify(garbage), Err(TokenError::Malformed), "{garbage:?}");
        }
    }
}
