//! # trellis-store-sqlite
//!
//! The embedded durable backend: one SQLite file in WAL mode (or an in-memory database for
//! throw-away runs) implementing every store port of `trellis-core`.
//!
//! | table         | holds                                                                 |
//! |---------------|-----------------------------------------------------------------------|
//! | `workflows`   | definition documents by `(namespace, workflow_id, content_hash)`        |
//! | `runs`        | one row per run: the state's header, its edge letters, version, tenant, status and until when it is kept |
//! | `run_nodes`   | each run's node states by `(run_id, node_id)`                          |
//! | `run_variables` | each run's variables by `(run_id, name)`                             |
//! | `event_pages` | the append-only event log: each commit's events as pages of up to 64, by `(run_id, first_sequence)` |
//! | `idempotency` | recorded responses by `(tenant, endpoint, key)`, kept for the retention |
//! | `tasks`       | the local queue *and* the outbox: due steps, timers and deadlines      |
//! | `votes`       | approval votes by `(run_id, interrupt_id, voter)` (the state keeps a tally) |
//! | `settings`    | host-wide settings (the capability overlay)                            |
//! | `records`     | host records by `(kind, scope, key)`: a version, a JSON value, an optional expiry (see `host_records`) |
//! | `run_blobs`   | each run's spilled values by `(run_id, reference)` (see `blobs`, `trellis_core::blob`) |
//!
//! A commit is one transaction: the run row (guarded by its version) and the node and
//! variable rows the step touched, the new events, the votes they cast and the new task rows.
//! Recently stepped live runs are also kept in memory (the hot-run cache), so a step does not
//! read its run back. Tasks have deterministic ids, so re-issuing one is
//! a no-op. The database is opened in exclusive locking mode: one host process owns a data
//! directory, so at open every task lease and every pending idempotency claim of a previous
//! (crashed) process is released, and finished idempotency records past the retention are
//! deleted (later, a bounded batch per claim), as are lapsed host records (later, a bounded
//! batch per record put). A deleted run's rows go in one write ([`SqliteStore::delete_run`]
//! through the group commit); the file is kept in `auto_vacuum = INCREMENTAL`, so
//! `reclaim_space` gives the freed pages back, and [`SqliteStore::expired_runs`] lists the
//! runs whose retention ran out for the host's sweeper. [`RowUsage`] counts the rows each
//! operation touches.

mod batch;
mod blobs;
mod cache;
mod host_records;
mod pages;
mod records;
mod removal;
mod schema;
mod store;
mod usage;
mod writer;

pub use store::SqliteStore;
pub use usage::RowUsage;

#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod tests;
