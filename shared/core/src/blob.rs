//! Large payloads without a cliff: a value of a run's documents (an input, a variable, a
//! node's outputs, the run's outputs, an event's payload) whose JSON is larger than
//! [`INLINE_LIMIT`] is stored apart, as a *blob* of its run, and the document carries a
//! reference in its place:
//!
//! ```json
//! {"$trellisBlob": {"ref": "<sha256 hex>", "size": 5242880, "sha256": "<sha256 hex>"}}
//! ```
//!
//! `GET /v1/runs/{runId}/blobs/{ref}` returns the value. A blob is its content's address
//! within its run (the SHA-256 of its JSON bytes), so spilling is a pure function of the
//! value ([`spill`]): the same value always gets the same reference, whether it is spilled
//! for storage or only for a view ([`view`]). Blobs are deleted with their run.
//!
//! Where: the commit loop spills what a commit writes before the store sees it and stores the
//! blobs first (`service::blobs`); the engine always works on whole values, read back
//! ([`hydrate`]) when a run is loaded. The embedded host keeps blobs in its SQLite file, the
//! AWS host in S3 (see the stores).
//!
//! Spilling descends first: an object or array over the limit has its largest members
//! spilled until it fits, so `{"status": 200, "body": <5 MB>}` keeps its status inline; a
//! string, number or a container of many small members over the limit is spilled whole.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The key of a reference object.
pub const MARKER: &str = "$trellisBlob";
/// The largest value kept inline, in bytes of JSON (256 KiB).
pub const INLINE_LIMIT: usize = 256 * 1024;
/// The largest value a run may hold at all (one blob), in bytes of JSON.
pub const MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;
/// The smallest member spilled to bring its container under the limit.
const MIN_SPILLED: usize = 1024;
/// The error code of a value over [`MAX_VALUE_BYTES`], and of a commit a store cannot hold.
pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";

/// A spilled value's bytes, to store under its reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// The reference (the SHA-256 of `bytes`, lowercase hex).
    pub reference: String,
    /// The value's JSON.
    pub bytes: Vec<u8>,
}

/// What a run knows of its blobs: size by reference (kept in its header, so a run without
/// blobs is never walked for references).
pub type BlobIndex = BTreeMap<String, u64>;

/// The size of `value`'s JSON, without building it.
pub fn size<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The reference `value` is, if it is one: `(ref, size)`.
pub fn reference(value: &Value) -> Option<(&str, u64)> {
    let Value::Object(fields) = value else { return None };
    if fields.len() != 1 {
        return None;
    }
    let inner = fields.get(MARKER)?;
    Some((inner.get("ref")?.as_str()?, inner.get("size")?.as_u64()?))
}

/// The reference object of `blob`.
fn reference_of(blob: &Blob) -> Value {
    json!({ MARKER: { "ref": blob.reference, "size": blob.bytes.len(), "sha256": blob.reference } })
}

/// `value` as a blob.
pub fn blob_of(value: &Value) -> Blob {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Blob { reference: hex::encode(Sha256::digest(&bytes)), bytes }
}

/// Replaces the parts of `value` over `limit` bytes with references (see the module docs);
/// the blobs go to `out` (each reference once). Returns whether anything was spilled.
pub fn spill(value: &mut Value, limit: usize, out: &mut Vec<Blob>) -> bool {
    if reference(value).is_some() || size(value) <= limit {
        return false;
    }
    let mut spilled = false;
    for member in members(value) {
        spilled |= spill(member, limit, out);
    }
    // Still over: its largest members go, one by one, while that helps (a member smaller
    // than [`MIN_SPILLED`] would not: its reference is about as large).
    let mut total = size(value);
    if total > limit {
        let mut sized: Vec<(usize, &mut Value)> = members(value)
            .into_iter()
            .map(|member| (size(member), member))
            .filter(|(bytes, member)| *bytes >= MIN_SPILLED && reference(member).is_none())
            .collect();
        let mut order: Vec<usize> = (0..sized.len()).collect();
        order.sort_by_key(|&index| (std::cmp::Reverse(sized[index].0), index));
        for index in order {
            if total <= limit {
                break;
            }
            let (before, member) = &mut sized[index];
            replace(member, out);
            total = total - *before + size(member);
            spilled = true;
        }
    }
    if total > limit {
        replace(value, out);
        spilled = true;
    }
    spilled
}

/// The members of an object or array (none of a scalar).
fn members(value: &mut Value) -> Vec<&mut Value> {
    match value {
        Value::Object(fields) => fields.values_mut().collect(),
        Value::Array(items) => items.iter_mut().collect(),
        _ => Vec::new(),
    }
}

/// Replaces `value` with its reference, keeping its blob.
fn replace(value: &mut Value, out: &mut Vec<Blob>) {
    let blob = blob_of(value);
    *value = reference_of(&blob);
    if !out.iter().any(|known| known.reference == blob.reference) {
        out.push(blob);
    }
}

/// `value` as a reader sees it: [`spill`]ed without keeping the blobs.
pub fn view(value: &Value, limit: usize) -> Value {
    let mut viewed = value.clone();
    spill(&mut viewed, limit, &mut Vec::new());
    viewed
}

/// [`view`] of a map's values, one by one (a run's variables and inputs).
pub fn view_members(values: &Map<String, Value>, limit: usize) -> Map<String, Value> {
    values.iter().map(|(name, value)| (name.clone(), view(value, limit))).collect()
}

/// Every reference in `value`, in order (each once).
pub fn references(value: &Value, out: &mut Vec<String>) {
    if let Some((reference, _)) = reference(value) {
        if !out.iter().any(|known| known == reference) {
            out.push(reference.to_owned());
        }
        return;
    }
    match value {
        Value::Object(fields) => fields.values().for_each(|member| references(member, out)),
        Value::Array(items) => items.iter().for_each(|member| references(member, out)),
        _ => {}
    }
}

/// [`references`] of an object given as its map (a node's or the run's outputs), which may
/// itself be one reference.
pub fn map_references(fields: &Map<String, Value>, out: &mut Vec<String>) {
    match fields.get(MARKER).and_then(|inner| inner.get("ref")).and_then(Value::as_str) {
        Some(reference) if fields.len() == 1 => {
            if !out.iter().any(|known| known == reference) {
                out.push(reference.to_owned());
            }
        }
        _ => fields.values().for_each(|member| references(member, out)),
    }
}

/// Puts the values back in place of the references in `value` that `values` holds (others
/// stay: a reference a run does not own is left as written).
pub fn hydrate(value: &mut Value, values: &BTreeMap<String, Value>) {
    if let Some((reference, _)) = reference(value) {
        if let Some(found) = values.get(reference) {
            *value = found.clone();
        }
        return;
    }
    match value {
        Value::Object(fields) => fields.values_mut().for_each(|member| hydrate(member, values)),
        Value::Array(items) => items.iter_mut().for_each(|member| hydrate(member, values)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(bytes: usize) -> Value {
        Value::String("x".repeat(bytes))
    }

    #[test]
    fn small_values_stay_and_a_large_member_goes_alone() {
        let mut small = json!({"a": 1, "b": "two"});
        let mut out = Vec::new();
        assert!(!spill(&mut small, 100, &mut out));
        assert!(out.is_empty());

        let mut response = json!({"status": 200, "headers": {"a": "b"}, "body": big(1000)});
        assert!(spill(&mut response, 400, &mut out));
        assert_eq!(response["status"], 200);
        assert_eq!(response["headers"], json!({"a": "b"}));
        let (reference, size) = super::reference(&response["body"]).expect("the body is a reference");
        assert_eq!(size, 1002);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].reference, reference);
        assert_eq!(serde_json::from_slice::<Value>(&out[0].bytes).unwrap(), big(1000));
        assert_eq!(response["body"][MARKER]["sha256"], reference);
    }

    #[test]
    fn many_medium_members_spill_largest_first_and_spilling_is_a_function_of_the_value() {
        let original = json!({"a": big(3000), "b": big(4000), "c": big(3500), "d": 1});
        let mut first = original.clone();
        let mut out = Vec::new();
        spill(&mut first, 9000, &mut out);
        assert!(reference(&first["b"]).is_some(), "the largest goes first: {first}");
        assert_eq!((first["a"].clone(), first["c"].clone()), (big(3000), big(3500)), "then it fits");
        assert!(size(&first) <= 9000, "{first}");
        assert_eq!(first["d"], 1);
        assert_eq!(view(&original, 9000), first, "a view spills the same way");
        let mut values = BTreeMap::new();
        for blob in &out {
            values.insert(blob.reference.clone(), serde_json::from_slice(&blob.bytes).unwrap());
        }
        let mut back = first.clone();
        hydrate(&mut back, &values);
        assert_eq!(back, original);
        let mut refs = Vec::new();
        references(&first, &mut refs);
        assert_eq!(refs.len(), out.len());
    }

    #[test]
    fn a_large_scalar_or_a_flat_crowd_goes_whole_and_a_reference_is_not_spilled_again() {
        let mut text = big(500);
        let mut out = Vec::new();
        assert!(spill(&mut text, 300, &mut out));
        assert!(reference(&text).is_some());
        let again = text.clone();
        assert!(!spill(&mut text, 10, &mut out), "a reference stays");
        assert_eq!(text, again);
        let mut crowd = Value::Array((0..30_000).map(|n| json!(format!("item {n}"))).collect());
        spill(&mut crowd, 300, &mut out);
        assert!(reference(&crowd).is_some(), "small members cannot bring it under the limit");
        let whole = json!((0..30_000).map(|n| format!("item {n}")).collect::<Vec<_>>());
        assert_eq!(out.last().map(|blob| blob.bytes.len()), Some(size(&whole)), "one blob: the whole array");
        assert!(reference(&json!({MARKER: {"ref": "r", "size": 1}, "other": 1})).is_none(), "not a lone marker");
    }
}
