//! Layer-1 idempotency (`Idempotency-Key`) for every mutating route: claim the key before
//! doing anything, then either keep the final answer or drop the claim.
//!
//! - Same key, same request, answered before → the recorded answer is replayed.
//! - Same key, another request → `idempotency_key_mismatch`, no body of the first.
//! - Same key while the first is still being processed → in flight (the caller may wait).
//! - Validation and auth refusals and retryable failures are not kept.

use super::Services;
use crate::error::ServiceError;
use crate::ports::{IdempotencyClaim, IdempotencyRecord};
use crate::service::IdempotencyKey;

/// How long a claim holds before another request may take the key over (a crashed holder).
const CLAIM_LEASE_MS: u64 = 30_000;

/// What to do with a keyed request.
#[derive(Debug)]
pub enum Begin {
    /// Process it; then [`Services::keep_answer`] or [`Services::drop_claim`].
    Proceed,
    /// Answer with this recorded response.
    Replay(IdempotencyRecord),
    /// Another request with the key is being processed.
    InFlight,
}

impl Services {
    /// Claims `key` for `tenant`.
    pub async fn begin_keyed(&self, tenant: &str, key: &IdempotencyKey) -> Result<Begin, ServiceError> {
        let now = self.clock.now();
        let claim = self
            .store
            .claim_idempotency(tenant, &key.endpoint, &key.key, &key.request_digest, now, now + CLAIM_LEASE_MS)
            .await?;
        match claim {
            IdempotencyClaim::Claimed => Ok(Begin::Proceed),
            IdempotencyClaim::Completed(record) if record.request_digest == key.request_digest => {
                Ok(Begin::Replay(record))
            }
            IdempotencyClaim::Completed(_) => Err(ServiceError::IdempotencyKeyMismatch),
            IdempotencyClaim::InFlight { request_digest } if request_digest == key.request_digest => {
                Ok(Begin::InFlight)
            }
            IdempotencyClaim::InFlight { .. } => Err(ServiceError::IdempotencyKeyMismatch),
        }
    }

    /// Keeps the final answer of a claimed key.
    pub async fn keep_answer(&self, tenant: &str, key: &IdempotencyKey, status: u16, body: serde_json::Value) {
        let record = IdempotencyRecord {
            tenant: tenant.to_owned(),
            endpoint: key.endpoint.clone(),
            key: key.key.clone(),
            request_digest: key.request_digest.clone(),
            status,
            body,
            created_at: self.clock.now(),
        };
        // Failing to keep the answer only means a retry is processed again; the claim's lease
        // then expires and the key can be taken over.
        let _ = self.store.complete_idempotency(&record).await;
    }

    /// Drops a claim whose answer must not be replayed.
    pub async fn drop_claim(&self, tenant: &str, key: &IdempotencyKey) {
        let _ = self.store.abandon_idempotency(tenant, &key.endpoint, &key.key).await;
    }
}
