//! Signatures of webhook bodies, outbound and inbound: HMAC-SHA256 with the subscription's
//! secret over `"{timestamp}.{rawBody}"`, sent as `sha256=<hex>` in both header families
//! (`X-openwop-*` and RFC 0165's `OpenWOP-*`).
//!
//! The verifier (inbound triggers, and any receiver built on this crate) accepts the three
//! spellings in circulation — `sha256=<hex>` (the spec), `v1=<hex>` (the conformance suite's
//! receiver library) and bare hex (older reference hosts) — several of them separated by `,`
//! or spaces (a sender rotating secrets), compares in constant time, and refuses a timestamp
//! more than [`TOLERANCE_SECS`] away from now. Its refusal reasons are the receiver library's.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The signature algorithm label (`X-openwop-Signature-Algorithm`; absent means `v1`).
pub const ALGORITHM: &str = "v1";
/// How far a signed timestamp may be from the receiver's clock, either way.
pub const TOLERANCE_SECS: u64 = 300;
/// The prefix of a secret this host generates.
pub const SECRET_PREFIX: &str = "whsec_";

/// The header families: the values of each pair are identical.
pub mod headers {
    /// The subscription (`webhookId` / `subscriptionId`).
    pub const WEBHOOK_ID: [&str; 2] = ["x-openwop-webhook-id", "openwop-webhook-id"];
    /// The event type.
    pub const EVENT_TYPE: [&str; 2] = ["x-openwop-event-type", "openwop-event-type"];
    /// Unix seconds of the signature.
    pub const TIMESTAMP: [&str; 2] = ["x-openwop-timestamp", "openwop-timestamp"];
    /// `sha256=<hex>`.
    pub const SIGNATURE: [&str; 2] = ["x-openwop-signature", "openwop-signature"];
    /// `v1`.
    pub const ALGORITHM: [&str; 2] = ["x-openwop-signature-algorithm", "openwop-signature-algorithm"];
    /// The stable id of what is delivered (receivers deduplicate on it).
    pub const DELIVERY_ID: [&str; 2] = ["x-openwop-delivery-id", "openwop-delivery-id"];
}

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &str, timestamp: u64, body: &[u8]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The signature header value of `body` signed at `timestamp` (Unix seconds): `sha256=<hex>`.
pub fn signature(secret: &str, timestamp: u64, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(mac(secret, timestamp, body)))
}

/// The public fingerprint of a secret: the first 8 hex characters of its SHA-256.
pub fn fingerprint(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))[..8].to_owned()
}

/// A secret made of 32 random bytes (`whsec_<64 hex>`).
pub fn new_secret(random: [u8; 32]) -> String {
    format!("{SECRET_PREFIX}{}", hex::encode(random))
}

/// Why a signed request was not accepted (the receiver library's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// No signature header, or one with no signature of a known form.
    #[error("the signature header is missing or malformed")]
    MalformedSignatureHeader,
    /// No timestamp header, or one that is not Unix seconds.
    #[error("the timestamp header is missing or malformed")]
    MalformedTimestampHeader,
    /// The timestamp is older than the tolerance.
    #[error("the signed timestamp is too old")]
    TimestampExpired,
    /// The timestamp is further ahead than the tolerance.
    #[error("the signed timestamp is too far in the future")]
    TimestampTooFarInFuture,
    /// An algorithm other than `v1` was named.
    #[error("the signature algorithm is not v1")]
    WrongAlgorithm,
    /// No signature matches the body.
    #[error("the signature does not match the body")]
    SignatureMismatch,
}

impl VerifyError {
    /// The reason as the receiver library spells it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::MalformedSignatureHeader => "malformed_signature_header",
            Self::MalformedTimestampHeader => "malformed_timestamp_header",
            Self::TimestampExpired => "timestamp_expired",
            Self::TimestampTooFarInFuture => "timestamp_too_far_in_future",
            Self::WrongAlgorithm => "wrong_algorithm",
            Self::SignatureMismatch => "signature_mismatch",
        }
    }
}

/// What a signed request carried.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signed<'a> {
    /// The timestamp header.
    pub timestamp: Option<&'a str>,
    /// The signature header.
    pub signature: Option<&'a str>,
    /// The algorithm header.
    pub algorithm: Option<&'a str>,
}

/// Verifies `body` against `signed` with `secret`, `now_secs` being the receiver's clock.
pub fn verify(secret: &str, signed: Signed<'_>, body: &[u8], now_secs: u64) -> Result<(), VerifyError> {
    if signed.algorithm.is_some_and(|algorithm| !algorithm.trim().eq_ignore_ascii_case(ALGORITHM)) {
        return Err(VerifyError::WrongAlgorithm);
    }
    let timestamp: u64 = signed
        .timestamp
        .map(str::trim)
        .filter(|text| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
        .and_then(|text| text.parse().ok())
        .ok_or(VerifyError::MalformedTimestampHeader)?;
    let candidates = parse_signatures(signed.signature.ok_or(VerifyError::MalformedSignatureHeader)?);
    if candidates.is_empty() {
        return Err(VerifyError::MalformedSignatureHeader);
    }
    if timestamp + TOLERANCE_SECS < now_secs {
        return Err(VerifyError::TimestampExpired);
    }
    if timestamp > now_secs + TOLERANCE_SECS {
        return Err(VerifyError::TimestampTooFarInFuture);
    }
    let expected = mac(secret, timestamp, body);
    if candidates.iter().any(|candidate| bool::from(candidate.as_slice().ct_eq(&expected))) {
        Ok(())
    } else {
        Err(VerifyError::SignatureMismatch)
    }
}

/// The 32-byte signatures a header carries (`sha256=`, `v1=` or bare hex; separated by `,` or
/// whitespace). Entries of another form are ignored.
fn parse_signatures(header: &str) -> Vec<Vec<u8>> {
    header
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|part| !part.is_empty())
        .filter_map(|part| {
            let hex_text = part.strip_prefix("sha256=").or_else(|| part.strip_prefix("v1=")).unwrap_or(part);
            hex::decode(hex_text).ok().filter(|bytes| bytes.len() == 32)
        })
        .collect()
}

/// A digest of `text` as lower-case hex (dedup keys, request digests).
pub fn sha256_hex(text: &[u8]) -> String {
    hex::encode(Sha256::digest(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test";

    fn signed<'a>(timestamp: &'a str, signature: &'a str) -> Signed<'a> {
        Signed { timestamp: Some(timestamp), signature: Some(signature), algorithm: None }
    }

    #[test]
    fn a_signature_verifies_in_every_spelling_and_only_for_its_body() {
        let body = br#"{"type":"run.completed"}"#;
        let header = signature(SECRET, 1_700_000_000, body);
        assert!(header.starts_with("sha256=") && header.len() == 7 + 64);
        let bare = header.trim_start_matches("sha256=").to_owned();
        let now = 1_700_000_010;
        for form in [header.clone(), format!("v1={bare}"), bare, format!("sha256=00, {header}")] {
            assert_eq!(verify(SECRET, signed("1700000000", &form), body, now), Ok(()), "{form}");
        }
        assert_eq!(verify(SECRET, signed("1700000000", &header), b"{}", now), Err(VerifyError::SignatureMismatch));
        assert_eq!(verify("other", signed("1700000000", &header), body, now), Err(VerifyError::SignatureMismatch));
        assert_eq!(verify(SECRET, signed("1700000001", &header), body, now), Err(VerifyError::SignatureMismatch));
    }

    #[test]
    fn refusals_name_the_receiver_librarys_reasons() {
        let body = b"x";
        let good = signature(SECRET, 1_000_000, body);
        let at = |now| verify(SECRET, signed("1000000", &good), body, now);
        assert_eq!(at(1_000_000 + TOLERANCE_SECS), Ok(()));
        assert_eq!(at(1_000_000 + TOLERANCE_SECS + 1), Err(VerifyError::TimestampExpired));
        assert_eq!(at(1_000_000 - TOLERANCE_SECS - 1), Err(VerifyError::TimestampTooFarInFuture));
        assert_eq!(verify(SECRET, signed("soon", &good), body, 1_000_000), Err(VerifyError::MalformedTimestampHeader));
        assert_eq!(
            verify(SECRET, signed("1000000", "sha256=zz"), body, 1_000_000),
            Err(VerifyError::MalformedSignatureHeader)
        );
        let missing = Signed { timestamp: Some("1000000"), signature: None, algorithm: None };
        assert_eq!(verify(SECRET, missing, body, 1_000_000), Err(VerifyError::MalformedSignatureHeader));
        let v2 = Signed { algorithm: Some("v2"), ..signed("1000000", &good) };
        assert_eq!(verify(SECRET, v2, body, 1_000_000), Err(VerifyError::WrongAlgorithm));
        assert_eq!(VerifyError::TimestampExpired.reason(), "timestamp_expired");
    }

    #[test]
    fn secrets_and_fingerprints() {
        let secret = new_secret([7; 32]);
        assert!(secret.starts_with(SECRET_PREFIX) && secret.len() == SECRET_PREFIX.len() + 64);
        assert_eq!(fingerprint(&secret).len(), 8);
        assert_ne!(fingerprint(&secret), fingerprint(&new_secret([8; 32])));
    }
}
