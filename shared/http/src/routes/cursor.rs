//! The one home of list paging: `limit` (1..=100, 20 when absent) and opaque cursors. A
//! cursor is signed (HMAC-SHA256 with the host's secret) and bound to its listing and to the
//! caller's tenant; a cursor that was altered, or replayed on another listing or by another
//! tenant, is refused with `400 validation_error` naming `cursor`.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::Sha256;

use crate::error::ApiError;

/// Page size when `limit` is absent, and the largest allowed.
pub(crate) const DEFAULT_LIMIT: usize = 20;
pub(crate) const MAX_LIMIT: usize = 100;

/// `limit` of `query`.
pub(crate) fn page_limit(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("limit").map(|raw| raw.parse::<usize>()) {
        None => Ok(DEFAULT_LIMIT),
        Some(Ok(limit)) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        Some(_) => Err(ApiError::validation(format!("limit must be from 1 to {MAX_LIMIT}"))
            .with_details(json!({ "parameter": "limit" }))),
    }
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    listing: String,
    tenant: String,
    position: T,
}

fn mac(key: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(payload);
    mac
}

/// The cursor text for `position` in `listing` of `tenant`.
pub(crate) fn encode<T: Serialize>(key: &[u8], listing: &str, tenant: &str, position: T) -> String {
    let envelope = Envelope { listing: listing.to_owned(), tenant: tenant.to_owned(), position };
    let payload = serde_json::to_vec(&envelope).expect("cursor serializes");
    let tag = mac(key, &payload).finalize().into_bytes();
    format!("{}.{}", hex::encode(&payload), hex::encode(tag))
}

fn invalid() -> ApiError {
    ApiError::validation("the cursor is invalid for this listing").with_details(json!({ "parameter": "cursor" }))
}

/// The position a cursor of `listing` for `tenant` holds.
pub(crate) fn decode<T: DeserializeOwned>(key: &[u8], listing: &str, tenant: &str, text: &str) -> Result<T, ApiError> {
    let (payload, tag) = text.split_once('.').ok_or_else(invalid)?;
    let payload = hex::decode(payload).map_err(|_| invalid())?;
    let tag = hex::decode(tag).map_err(|_| invalid())?;
    mac(key, &payload).verify_slice(&tag).map_err(|_| invalid())?;
    let envelope: Envelope<T> = serde_json::from_slice(&payload).map_err(|_| invalid())?;
    if envelope.listing != listing || envelope.tenant != tenant {
        return Err(invalid());
    }
    Ok(envelope.position)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_bound_to_key_listing_and_tenant() {
        let text = encode(b"secret", "runs", "a", 5u32);
        assert_eq!(decode::<u32>(b"secret", "runs", "a", &text).unwrap(), 5);
        assert!(decode::<u32>(b"other", "runs", "a", &text).is_err());
        assert!(decode::<u32>(b"secret", "runs", "b", &text).is_err());
        assert!(decode::<u32>(b"secret", "workflows", "a", &text).is_err());
        let mut tampered = text;
        tampered.replace_range(0..2, "00");
        assert!(decode::<u32>(b"secret", "runs", "a", &tampered).is_err());
    }
}
