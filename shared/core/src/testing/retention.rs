//! Idempotency retention ([`IDEMPOTENCY_RETENTION_MS`]), with the time given explicitly (the
//! injected clock of the use cases): a finished record older than the retention is absent —
//! its key is free for a new claim or a new create — and a younger one is still replayed.
//! Times sit in 2100 so a backend's own expiry (DynamoDB TTL) never removes them early.

use std::sync::Arc;

use serde_json::json;

use super::{pending_run, record};
use crate::limits::IDEMPOTENCY_RETENTION_MS;
use crate::ports::{CreateResult, IdempotencyClaim, Store};

/// 2100-01-01T00:00:00Z.
const BASE: u64 = 4_102_444_800_000;

pub(super) async fn idempotency_records_expire(store: Arc<dyn Store>) {
    let (tenant, endpoint) = ("t-retention", "POST /v1/runs/r/cancel");
    assert_eq!(
        store.claim_idempotency(tenant, endpoint, "k", "d1", BASE, BASE + 30_000).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    let mut answer = record("k", "d1", json!({"status": "cancelled"}));
    (answer.tenant, answer.endpoint, answer.created_at) = (tenant.into(), endpoint.into(), BASE);
    store.complete_idempotency(&answer).await.unwrap();
    let last_moment = BASE + IDEMPOTENCY_RETENTION_MS - 1;
    match store.claim_idempotency(tenant, endpoint, "k", "d2", last_moment, last_moment + 30_000).await.unwrap() {
        IdempotencyClaim::Completed(found) => assert_eq!(found.body, json!({"status": "cancelled"})),
        other => panic!("a record within the retention is replayed, got {other:?}"),
    }
    let expired = BASE + IDEMPOTENCY_RETENTION_MS;
    assert_eq!(
        store.claim_idempotency(tenant, endpoint, "k", "d2", expired, expired + 30_000).await.unwrap(),
        IdempotencyClaim::Claimed,
        "past the retention the key is free"
    );

    // A keyed create finds an expired record absent too, and replaces it.
    let workflow = super::chain_workflow();
    let mut first = record("k-create", "d1", json!({"runId": "run-ret-1"}));
    (first.tenant, first.created_at) = (tenant.into(), BASE);
    let run = pending_run(&workflow, "run-ret-1", tenant);
    assert_eq!(store.create_run(&run, &[], &[], Some(&first)).await.unwrap(), CreateResult::Created);
    let mut second = record("k-create", "d2", json!({"runId": "run-ret-2"}));
    (second.tenant, second.created_at) = (tenant.into(), BASE + IDEMPOTENCY_RETENTION_MS - 1);
    let run = pending_run(&workflow, "run-ret-2", tenant);
    assert!(matches!(store.create_run(&run, &[], &[], Some(&second)).await.unwrap(), CreateResult::Existing(_)));
    second.created_at = BASE + IDEMPOTENCY_RETENTION_MS;
    assert_eq!(store.create_run(&run, &[], &[], Some(&second)).await.unwrap(), CreateResult::Created);
    match store.claim_idempotency(tenant, "POST /v1/runs", "k-create", "d2", expired, expired + 1).await.unwrap() {
        IdempotencyClaim::Completed(found) => assert_eq!(found.body, json!({"runId": "run-ret-2"})),
        other => panic!("the new record is kept, got {other:?}"),
    }
}
