//! Partition and sort keys of every item kind (see the crate docs).

use sha2::{Digest, Sha256};

/// Partition key attribute.
pub(crate) const PK: &str = "pk";
/// Sort key attribute.
pub(crate) const SK: &str = "sk";
/// The run-listing index.
pub(crate) const RUNS_BY_TENANT: &str = "runs_by_tenant";

pub(crate) fn run_pk(run_id: &str) -> String {
    format!("RUN#{run_id}")
}

pub(crate) const STATE_SK: &str = "STATE";

/// Commit pages sort by version.
pub(crate) const PAGE_PREFIX: &str = "V#";

pub(crate) fn page_sk(version: u64) -> String {
    format!("V#{version:020}")
}

/// Fan-out slot records (`trellis_core::engine::is_fan_out_record`), one item each.
pub(crate) const SLOT_PREFIX: &str = "SLOT#";

/// The item of fan-out record `record_key` (`<nodeId>#<k>`, `<nodeId>#items`).
pub(crate) fn slot_sk(record_key: &str) -> String {
    format!("{SLOT_PREFIX}{record_key}")
}

/// "Effects sent" markers, one per page.
pub(crate) const MARKER_PREFIX: &str = "S#";

pub(crate) fn marker_sk(version: u64) -> String {
    format!("S#{version:020}")
}

/// Outbox entries are grouped in partitions of this many milliseconds of writing time…
pub(crate) const OUTBOX_BUCKET_MS: u64 = 600_000;
/// …each spread over this many shards (by run), so no partition takes every commit.
pub(crate) const OUTBOX_SHARDS: u64 = 4;
/// How long an outbox entry is kept (its TTL); the reconciler looks back far less.
pub(crate) const OUTBOX_RETENTION_MS: u64 = 7 * 86_400_000;

pub(crate) fn outbox_shard(run_id: &str) -> u64 {
    let digest = Sha256::digest(run_id.as_bytes());
    u64::from(digest[0]) % OUTBOX_SHARDS
}

/// The partition of the outbox entries written in `bucket` (see [`OUTBOX_BUCKET_MS`]) on `shard`.
pub(crate) fn outbox_partition(bucket: u64, shard: u64) -> String {
    format!("OUTBOX#{bucket:020}#{shard}")
}

pub(crate) fn outbox_pk(written_at: u64, run_id: &str) -> String {
    outbox_partition(written_at / OUTBOX_BUCKET_MS, outbox_shard(run_id))
}

/// Entries sort by writing time, so a sweep reads a time range of each partition.
pub(crate) fn outbox_sk(written_at: u64, run_id: &str, version: u64) -> String {
    format!("{written_at:020}#{run_id}#{version:020}")
}

/// The reconciler's watermark: entries written before it were looked at.
pub(crate) const RECONCILED_SK: &str = "RECONCILED";

pub(crate) fn idempotency_pk(tenant: &str, endpoint: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{endpoint}:{key}").as_bytes());
    format!("IDEM#{tenant}#{}", hex::encode(digest))
}

pub(crate) const IDEMPOTENCY_SK: &str = "IDEM";

pub(crate) fn workflow_pk(namespace: &str, workflow_id: &str) -> String {
    format!("WF#{namespace}#{workflow_id}")
}

pub(crate) fn workflow_sk(content_hash: &str) -> String {
    format!("H#{content_hash}")
}

/// The partition listing the workflow ids of a namespace (one item per id).
pub(crate) fn workflow_directory_pk(namespace: &str) -> String {
    format!("WFDIR#{namespace}")
}

/// Sort keys of the directory entries.
pub(crate) const WORKFLOW_ENTRY_PREFIX: &str = "ID#";

/// A vote, in its run's partition: by occurrence and (hashed, so any voter string fits) voter.
pub(crate) fn vote_sk(interrupt_id: &str, voter: &str) -> String {
    format!("VOTE#{interrupt_id}#{}", hex::encode(Sha256::digest(voter.as_bytes())))
}

pub(crate) fn tenant_gsi_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}")
}

pub(crate) fn tenant_gsi_sk(created_at: u64, run_id: &str) -> String {
    format!("{created_at:020}#{run_id}")
}

/// Partition of host-wide settings (the capability overlay).
pub(crate) const HOST_PK: &str = "HOST";

pub(crate) fn setting_sk(key: &str) -> String {
    format!("SETTING#{key}")
}

/// The partition of the host records of `(kind, scope)` (`trellis_core::ports::Record`): their
/// items sort by key, so a listing is one query. `kind` has no `#` (the stores refuse one),
/// so no two `(kind, scope)` pairs share a partition.
pub(crate) fn record_pk(kind: &str, scope: &str) -> String {
    format!("REC#{kind}#{scope}")
}

/// The sort key of host record `key`: the key itself (its partition holds records only).
pub(crate) fn record_sk(key: &str) -> String {
    key.to_owned()
}

/// The `ClientRequestToken` of a commit: the same for a retry of the same commit.
pub(crate) fn commit_token(run_id: &str, expected_version: u64) -> String {
    let digest = Sha256::digest(format!("{run_id}:{expected_version}").as_bytes());
    hex::encode(digest)[..36].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_keys_sort_by_version() {
        assert!(page_sk(9) < page_sk(10));
        assert!(page_sk(u64::MAX).starts_with(PAGE_PREFIX) && marker_sk(3).starts_with(MARKER_PREFIX));
        assert_eq!(commit_token("r", 1), commit_token("r", 1));
        assert_ne!(commit_token("r", 1), commit_token("r", 2));
        assert_eq!(commit_token("r", 1).len(), 36);
    }

    #[test]
    fn record_keys_keep_kinds_and_scopes_apart() {
        assert_eq!((record_pk("webhook", "t1"), record_sk("a#b")), ("REC#webhook#t1".to_owned(), "a#b".to_owned()));
        assert_ne!(record_pk("a", "b#c"), record_pk("ab", "c"));
    }
}
