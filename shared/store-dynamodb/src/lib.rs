//! # trellis-store-dynamodb
//!
//! The serverless store: every `trellis-core` store port on one DynamoDB table, passing the
//! same contract suite as the SQLite store.
//!
//! ## Key design (single table), log-first
//!
//! | item                | `pk`                                   | `sk`                   | notes |
//! |---------------------|----------------------------------------|------------------------|-------|
//! | commit page         | `RUN#<runId>`                          | `V#<version:020>`      | the state after the commit (whole: a checkpoint; or what changed: a delta), its events and its effects; **the commit point** |
//! | "sent" marker       | `RUN#<runId>`                          | `S#<version:020>`      | the page's effects reached their queues (not written for a single next step) |
//! | outbox entry        | `OUTBOX#<bucket:020>#<shard>`          | `<writtenAt:020>#<runId>#<version:020>` | a page the reconciler looks at: an API commit with effects, or a failed send; 10-minute buckets, 4 shards, TTL 7 days |
//! | run item            | `RUN#<runId>`                          | `STATE`                | tenant, status, creation time, `gsi1pk`/`gsi1sk` for listing; rewritten on status transitions only |
//! | vote                | `RUN#<runId>`                          | `VOTE#<interruptId>#<sha256(voter)>` | one approval vote; the run's state keeps the tally |
//! | fan-out slot        | `RUN#<runId>`                          | `SLOT#<recordKey>`     | one record of a parallel fan-out (`<nodeId>#<k>`, `<nodeId>#items`) in `doc`, with `owner_activation`; written with every commit that touches it, outside the checkpoint (see `store/slots.rs`) |
//! | idempotency record  | `IDEM#<tenant>#<sha256(endpoint:key)>` | `IDEM`                 | `state` pending (leased) or completed (with the answer); `expires_at` = creation + retention |
//! | workflow definition | `WF#<namespace>#<workflowId>`          | `H#<contentHash>`      | `version` label, `seq` orders versions |
//! | workflow directory  | `WFDIR#<namespace>`                    | `<workflowId>`         | lists a namespace's ids by query |
//! | host record         | `REC#<kind>#<scope>`                   | `<key>`                | `version`, `value` (JSON text), optional `expires_at_ms` (exact) and `expires_at` (TTL, seconds rounded up); conditional puts and deletes (see `store/host_records.rs`) |
//!
//! A run's blobs (values over 256 KiB, `trellis_core::blob`) are S3 objects
//! `runs/<runId>/<sha256>` of the store's bucket (`store/blobs.rs`), deleted with the run and
//! expired by the bucket's lifecycle rule.
//!
//! The global secondary index `runs_by_tenant` (`gsi1pk = TENANT#<tenant>`, `gsi1sk =
//! <createdAt:020>#<runId>`) lists a tenant's runs newest first; a listed run is read from its
//! newest page.
//!
//! Every item of a run carries the same `expires_at` (epoch seconds; the table's TTL
//! attribute): creation time plus the retention period (30 days unless configured), so a
//! run's items expire together; reads treat an expired run as gone. Idempotency records
//! carry `expires_at` too (creation plus `limits::IDEMPOTENCY_RETENTION_SECONDS`); TTL
//! deletion is lazy, so claims and keyed creates treat an older record as absent. A host
//! record that lapses carries it as well, and reads and conditions treat it as absent from
//! its `expires_at_ms` on.
//!
//! Pages, run items, votes, markers, slots and outbox entries carry `format`: 4 on a page
//! whose state holds a parallel fan-out (its checkpoint lacks the slot records) and on slot
//! items, 3 on another delta page, 2 on everything else (votes are items, the state keeps a
//! tally), so an instance of the previous build reads checkpoints and refuses deltas and
//! fan-outs as retryable; an item without it is
//! format 1, still read (its state's votes still count); a newer format is
//! `StoreError::Unavailable` (retryable: a deployment overlaps old and new instances), never
//! `Corrupt`.
//!
//! ## Commits
//!
//! A commit of version `v` is one conditional `PutItem` of page `V#v` (`attribute_not_exists`):
//! two writers racing from the same version both target `V#v`, and exactly one wins — the
//! run's optimistic concurrency needs no separate state item. A page carries the whole
//! state (a checkpoint) or only what its commit changed (a delta, see `delta`): the state is
//! the newest checkpoint with the deltas after it, and an instance that has the run cached
//! at version `v` reads only the pages after `v` (`store/hot.rs`); events are read from the
//! newest pages backwards. The effects ride
//! in the page (the outbox); once sent, a tiny `S#v` marker records it, and a redelivered step
//! or the scheduled reconciler re-sends the effects of pages without a marker that nothing in
//! the data proves sent (`codec::proof`). A page whose single effect is the run's next step
//! keeps it in `next` and gets no marker: once the step is handled its node is no longer
//! scheduled in the newest state, which is the proof; until then it counts as unsent (a
//! redelivered task re-sends it only after the writer's grace). A child start or a notice to
//! the parent carried out by the committing call gets no marker either: the child existing
//! (or the parent no longer waiting) proves the start, the parent no longer waiting the notice.
//! The reconciler reads outbox entries of recent commits, not the table. Creation and
//! status transitions also write the run item, and a commit that touches fan-out slot
//! records writes their items (a put, or a delete for a removed record), in one
//! `TransactWriteItems` with a `ClientRequestToken` derived from the run id and version (an ambiguous retry of a commit
//! that landed reads as success; `TransactionConflict` is retried with jittered backoff).
//! DynamoDB's limits — 100 items and 4 MB per transaction, 400 KB per item — are checked
//! before sending and reported as `StoreError::LimitExceeded`, never retried.
//!
//! A parallel fan-out keeps no item growing with its children: the checkpoint carries the
//! fan-out node's counters, each child's record is its slot item (a child's end is a delta
//! page and its slot item in one transaction: 4 write units where a plain step costs 1), and
//! a state rebuilt from a checkpoint reads the slots of each fanning node with one query.
//! The join's deletes ride in its transaction when they fit, else they follow it.
//!
//! Cost per sequential `core.noop` step (a delta page under 1 KB, no marker, a checkpoint
//! every few steps, the run cached): about 1.3–1.4 write units and 1 read unit at any
//! workflow length; `trellis-bench-aws` measures it.

mod codec;
mod delta;
mod errors;
mod keys;
mod meter;
mod store;
mod table;

pub use codec::{item_size, proven_by_successor};
pub use meter::{Meter, Usage};
pub use store::{DynamoStore, UnsentPage, DEFAULT_RETENTION_DAYS};
pub use table::create_table;

/// Builds an S3 client from the environment (region, credentials and
/// `AWS_ENDPOINT_URL[_S3]`; path-style addressing when an endpoint is set, as local emulators
/// need), with a rustls + ring HTTPS client.
pub async fn s3_client_from_env() -> aws_sdk_s3::Client {
    use aws_smithy_http_client::{tls, Builder};
    let http = Builder::new().tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring)).build_https();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).load().await;
    let local = std::env::var_os("AWS_ENDPOINT_URL_S3").or_else(|| std::env::var_os("AWS_ENDPOINT_URL")).is_some();
    let s3 = aws_sdk_s3::config::Builder::from(&config).force_path_style(local).build();
    aws_sdk_s3::Client::from_conf(s3)
}

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
