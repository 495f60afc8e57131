//! A run's blobs (`trellis_core::blob`) in S3: object `runs/<runId>/<reference>` of the
//! store's bucket, one `PutObject` per blob before the commit that refers to it, one
//! `GetObject` per read, and a listing and batch delete when the run is deleted. Objects
//! expire by the bucket's lifecycle rules: each is tagged with the shortest tier
//! ([`EXPIRY_TIERS`]) that outlives its run's items (their TTL: creation + duration limit +
//! retention), and the template has one rule per tier. A store
//! without a bucket refuses to store a blob, naming the setting (`TRELLIS_BLOB_BUCKET`).

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use trellis_core::blob::Blob;
use trellis_core::ports::BlobStore;
use trellis_core::{RunState, StoreError};

use super::DynamoStore;

/// Keys per `DeleteObjects` (S3's limit).
const PER_DELETE: usize = 1000;

/// The object tag the bucket's lifecycle rules expire blobs by (`infra/template.yaml`).
pub(crate) const EXPIRY_TAG: &str = "trellis-expiry";
/// The expiry tiers, in days after an object's creation: one lifecycle rule each.
pub(crate) const EXPIRY_TIERS: [u64; 6] = [8, 32, 93, 366, 1100, 3660];

/// The tier of a blob written at `now` (epoch seconds) of a run whose items expire at
/// `expires_at`: the shortest that outlives the run's items by a day, so a blob is never
/// gone while its run is kept (the longest tier when none does).
pub(crate) fn expiry_tier(expires_at: u64, now: u64) -> u64 {
    let days = expires_at.saturating_sub(now).div_ceil(86_400) + 1;
    EXPIRY_TIERS.iter().copied().find(|tier| *tier >= days).unwrap_or(EXPIRY_TIERS[EXPIRY_TIERS.len() - 1])
}

/// The bucket a store keeps blobs in.
#[derive(Debug, Clone)]
pub(crate) struct BlobBucket {
    pub(crate) client: aws_sdk_s3::Client,
    pub(crate) bucket: String,
}

fn key(run_id: &str, reference: &str) -> String {
    format!("runs/{run_id}/{reference}")
}

fn unavailable(error: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("S3: {error}"))
}

impl DynamoStore {
    fn bucket(&self) -> Result<&BlobBucket, StoreError> {
        self.blobs.as_ref().ok_or_else(|| {
            StoreError::LimitExceeded(format!(
                "a value over {} bytes is stored in S3, and this host has no blob bucket (TRELLIS_BLOB_BUCKET)",
                trellis_core::blob::INLINE_LIMIT
            ))
        })
    }

    /// The bytes `run_id`'s blobs hold (a listing).
    pub(super) async fn blob_bytes(&self, run_id: &str) -> Result<u64, StoreError> {
        self.visit_blobs(run_id, false).await
    }

    /// Deletes every blob of `run_id` (a listing, then batch deletes); the bytes they held.
    pub(super) async fn remove_blobs(&self, run_id: &str) -> Result<u64, StoreError> {
        self.visit_blobs(run_id, true).await
    }

    /// Lists `run_id`'s blobs, deleting them when `delete`; their bytes.
    async fn visit_blobs(&self, run_id: &str, delete: bool) -> Result<u64, StoreError> {
        let Some(bucket) = self.blobs.as_ref() else { return Ok(0) };
        let prefix = format!("runs/{run_id}/");
        let mut bytes = 0u64;
        let mut token = None;
        loop {
            let listed = bucket
                .client
                .list_objects_v2()
                .bucket(&bucket.bucket)
                .prefix(&prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(unavailable)?;
            self.meter.blob_other();
            let objects: Vec<ObjectIdentifier> = listed
                .contents()
                .iter()
                .filter_map(|object| {
                    bytes += object.size().unwrap_or_default().max(0) as u64;
                    ObjectIdentifier::builder().key(object.key()?).build().ok()
                })
                .collect();
            for chunk in objects.chunks(PER_DELETE).filter(|_| delete) {
                let delete =
                    Delete::builder().set_objects(Some(chunk.to_vec())).quiet(true).build().map_err(unavailable)?;
                bucket
                    .client
                    .delete_objects()
                    .bucket(&bucket.bucket)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(unavailable)?;
                self.meter.blob_other();
            }
            match listed.next_continuation_token() {
                Some(next) if listed.is_truncated().unwrap_or(false) => token = Some(next.to_owned()),
                _ => return Ok(bytes),
            }
        }
    }
}

#[async_trait]
impl BlobStore for DynamoStore {
    async fn put_blobs(&self, run: &RunState, blobs: &[Blob]) -> Result<(), StoreError> {
        if blobs.is_empty() {
            return Ok(());
        }
        let bucket = self.bucket()?;
        let tier = expiry_tier(self.expires_at(run), super::now_ms() / 1000);
        for blob in blobs {
            bucket
                .client
                .put_object()
                .bucket(&bucket.bucket)
                .key(key(&run.run_id, &blob.reference))
                .content_type("application/json")
                .tagging(format!("{EXPIRY_TAG}={tier}d"))
                .body(ByteStream::from(blob.bytes.clone()))
                .send()
                .await
                .map_err(unavailable)?;
            self.meter.blob_put(blob.bytes.len());
        }
        Ok(())
    }

    async fn blob(&self, run_id: &str, reference: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(bucket) = self.blobs.as_ref() else { return Ok(None) };
        let answer = bucket.client.get_object().bucket(&bucket.bucket).key(key(run_id, reference)).send().await;
        self.meter.blob_get();
        match answer {
            Ok(object) => {
                let bytes = object.body.collect().await.map_err(unavailable)?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(error) if error.as_service_error().is_some_and(|service| service.is_no_such_key()) => Ok(None),
            Err(error) => Err(unavailable(aws_sdk_s3::error::DisplayErrorContext(error))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_outlives_its_run_by_the_shortest_tier() {
        let day = 86_400;
        assert_eq!(expiry_tier(1_000 + 31 * day, 1_000), 32, "a 30-day retention and a 1-day run");
        assert_eq!(expiry_tier(1_000 + 32 * day, 1_000), 93);
        assert_eq!(expiry_tier(1_000 + 5 * day, 1_000), 8);
        assert_eq!(expiry_tier(1_000, 1_000), 8, "an expired run: the shortest");
        assert_eq!(expiry_tier(1_000 + 9_000 * day, 1_000), 3660, "past every tier: the longest");
    }
}
