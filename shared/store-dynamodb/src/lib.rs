//! # trellis-store-dynamodb
//!
//! The serverless store: every `trellis-core` store port on one DynamoDB table, passing the
//! same contract suite as the SQLite store.
//!
//! ## Key design (single table)
//!
//! | item                | `pk`                                   | `sk`                   | notes |
//! |---------------------|----------------------------------------|------------------------|-------|
//! | run state           | `RUN#<runId>`                          | `STATE`                | `version` guards every write; `doc` is the state document; `gsi1pk`/`gsi1sk` list runs |
//! | event               | `RUN#<runId>`                          | `EVT#<sequence:020>`   | written with `attribute_not_exists(pk)`: no sequence is ever written twice |
//! | outbox entry        | `RUN#<runId>`                          | `OUT#<taskId>`         | effects of a commit, to be sent to the queues and then deleted |
//! | idempotency record  | `IDEM#<tenant>#<sha256(endpoint:key)>` | `IDEM`                 | `state` pending (leased) or completed (with the answer) |
//! | workflow definition | `WF#<namespace>#<workflowId>`          | `H#<contentHash>`      | `version` label, `seq` orders versions |
//!
//! Every item of a run carries the same `expires_at` (epoch seconds; the table's TTL
//! attribute): creation time plus the retention period (30 days unless configured), so a
//! run's state, events and outbox expire together; reads treat an expired run as gone.
//!
//! The global secondary index `runs_by_tenant` (`gsi1pk = TENANT#<tenant>`, `gsi1sk =
//! <createdAt:020>#<runId>`) lists a tenant's runs newest first.
//!
//! ## Commits
//!
//! A commit is one `TransactWriteItems`: the state item conditioned on the expected
//! version, the new events (each conditioned on not existing) and the outbox entries. Its
//! `ClientRequestToken` is derived from the run id and the expected version, so an ambiguous
//! commit (a timeout) retried with the same token reads as success when it had landed. A
//! version mismatch is [`trellis_core::StoreError::Conflict`]; `TransactionConflict` (a
//! concurrent transaction on the same items) is retried here with jittered backoff.
//! DynamoDB's limits — 100 items and 4 MB per transaction, 400 KB per item — are checked
//! before sending and reported as `StoreError::LimitExceeded`, never retried.

mod codec;
mod errors;
mod keys;
mod meter;
mod store;
mod table;

pub use meter::{Meter, Usage};
pub use store::{DynamoStore, DEFAULT_RETENTION_DAYS};
pub use table::{create_table, TableSpec};

/// Builds a DynamoDB client from the environment (region, credentials and
/// `AWS_ENDPOINT_URL[_DYNAMODB]`), with a rustls + ring HTTPS client.
pub async fn client_from_env() -> aws_sdk_dynamodb::Client {
    use aws_smithy_http_client::{tls, Builder};
    let http = Builder::new().tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring)).build_https();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).load().await;
    aws_sdk_dynamodb::Client::new(&config)
}

#[cfg(test)]
mod tests;
