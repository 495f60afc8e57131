//! Row accounting: how many rows, and how many bytes of stored documents, the store read and
//! wrote. The counterpart of the DynamoDB store's capacity meter, so a test can hold an
//! operation to a constant amount of store work (a vote on a gate with 10 votes and with
//! 10,000 costs the same). Counted: run, event, vote, task, workflow and idempotency rows
//! of every run-path operation (create, load, commit, events, votes, workflow reads, claims).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters so far.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    rows_read: AtomicU64,
    rows_written: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowUsage {
    /// Rows returned by reads.
    pub rows_read: u64,
    /// Rows inserted, updated or deleted.
    pub rows_written: u64,
    /// Bytes of the documents (state, payloads, bodies) in the rows read.
    pub bytes_read: u64,
    /// Bytes of the documents in the rows written.
    pub bytes_written: u64,
}

impl RowUsage {
    /// The work done between `earlier` and `self`.
    pub fn since(&self, earlier: &RowUsage) -> RowUsage {
        RowUsage {
            rows_read: self.rows_read - earlier.rows_read,
            rows_written: self.rows_written - earlier.rows_written,
            bytes_read: self.bytes_read - earlier.bytes_read,
            bytes_written: self.bytes_written - earlier.bytes_written,
        }
    }
}

impl Counters {
    /// `rows` read, carrying `bytes` of documents.
    pub(crate) fn read(&self, rows: u64, bytes: usize) {
        self.rows_read.fetch_add(rows, Ordering::Relaxed);
        self.bytes_read.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `rows` written, carrying `bytes` of documents.
    pub(crate) fn wrote(&self, rows: u64, bytes: usize) {
        self.rows_written.fetch_add(rows, Ordering::Relaxed);
        self.bytes_written.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counters now.
    pub(crate) fn usage(&self) -> RowUsage {
        RowUsage {
            rows_read: self.rows_read.load(Ordering::Relaxed),
            rows_written: self.rows_written.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
        }
    }
}
