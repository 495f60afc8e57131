//! # trellis-store-sqlite
//!
//! The embedded durable backend: one SQLite file in WAL mode (or an in-memory database for
//! throw-away runs) implementing every store port of `trellis-core`.
//!
//! | table         | holds                                                                 |
//! |---------------|-----------------------------------------------------------------------|
//! | `workflows`   | definition documents by `(namespace, workflow_id, content_hash)`        |
//! | `runs`        | one row per run: the state document, its version, tenant and status   |
//! | `events`      | the append-only event log by `(run_id, sequence)`                      |
//! | `idempotency` | recorded responses by `(tenant, endpoint, key)`                         |
//! | `tasks`       | the local queue *and* the outbox: due steps, timers and deadlines      |
//!
//! A commit is one transaction: the state row (guarded by its version), the new events and
//! the new task rows. Tasks have deterministic ids, so re-issuing one is a no-op. The
//! database is opened in exclusive locking mode: one host process owns a data directory, and
//! at open every task lease of a previous (crashed) process is released.

mod schema;
mod store;

pub use store::SqliteStore;

#[cfg(test)]
mod tests;
