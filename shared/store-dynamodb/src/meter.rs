//! Capacity accounting: the request units each operation costs, computed from the serialized
//! item sizes by AWS's published rules (DynamoDB Local's `ConsumedCapacity` under-reports
//! transactions). On-demand pricing bills exactly these units.
//!
//! - standard write: 1 WRU per started KB of the item; transactional write: 2 per KB;
//! - strongly consistent read: 1 RRU per started 4 KB (a query sums its items first); a read
//!   that finds nothing still costs 1.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec::{item_size, Item};

/// Units and requests so far.
#[derive(Debug, Default)]
pub struct Meter {
    write_units: AtomicU64,
    read_units: AtomicU64,
    write_requests: AtomicU64,
    read_requests: AtomicU64,
    blob_puts: AtomicU64,
    blob_gets: AtomicU64,
    blob_bytes: AtomicU64,
    blob_other: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Write request units.
    pub write_units: u64,
    /// Read request units.
    pub read_units: u64,
    /// Write requests (a transaction counts once).
    pub write_requests: u64,
    /// Read requests (get, query page, scan page).
    pub read_requests: u64,
    /// S3 `PutObject` requests (blobs stored).
    pub blob_puts: u64,
    /// S3 `GetObject` requests (blobs read).
    pub blob_gets: u64,
    /// Bytes of blobs stored.
    pub blob_bytes: u64,
    /// Other S3 requests (listing and deleting a run's blobs).
    pub blob_other: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;

    /// Two stores' counters together (the API function's and the dispatcher's).
    fn add(self, other: Usage) -> Usage {
        Usage {
            write_units: self.write_units + other.write_units,
            read_units: self.read_units + other.read_units,
            write_requests: self.write_requests + other.write_requests,
            read_requests: self.read_requests + other.read_requests,
            blob_puts: self.blob_puts + other.blob_puts,
            blob_gets: self.blob_gets + other.blob_gets,
            blob_bytes: self.blob_bytes + other.blob_bytes,
            blob_other: self.blob_other + other.blob_other,
        }
    }
}

fn kb(bytes: usize) -> u64 {
    (bytes.div_ceil(1024)).max(1) as u64
}

impl Meter {
    /// A transaction that wrote `items`.
    pub(crate) fn transaction(&self, items: &[&Item]) {
        let units: u64 = items.iter().map(|item| 2 * kb(item_size(item))).sum();
        self.write_units.fetch_add(units, Ordering::Relaxed);
        self.write_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch of standard writes (one request) of `items`.
    pub(crate) fn batch(&self, items: &[&Item]) {
        let units: u64 = items.iter().map(|item| kb(item_size(item))).sum();
        self.write_units.fetch_add(units, Ordering::Relaxed);
        self.write_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A standard write (put, update or delete) of an item of `bytes`.
    pub(crate) fn write(&self, bytes: usize) {
        self.write_units.fetch_add(kb(bytes), Ordering::Relaxed);
        self.write_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A strongly consistent read that returned `items`.
    pub(crate) fn read(&self, items: &[Item]) {
        let bytes: usize = items.iter().map(item_size).sum();
        self.read_units.fetch_add(bytes.div_ceil(4096).max(1) as u64, Ordering::Relaxed);
        self.read_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A read DynamoDB reported as `units` (a scan is billed for what it reads before its
    /// filter, which the returned items do not show).
    pub(crate) fn consumed(&self, units: f64) {
        self.read_units.fetch_add(units.ceil().max(1.0) as u64, Ordering::Relaxed);
        self.read_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A blob of `bytes` stored (one S3 `PutObject`).
    pub(crate) fn blob_put(&self, bytes: usize) {
        self.blob_puts.fetch_add(1, Ordering::Relaxed);
        self.blob_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A blob read (one S3 `GetObject`).
    pub(crate) fn blob_get(&self) {
        self.blob_gets.fetch_add(1, Ordering::Relaxed);
    }

    /// Another S3 request (a listing, a batch delete).
    pub(crate) fn blob_other(&self) {
        self.blob_other.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn usage(&self) -> Usage {
        Usage {
            write_units: self.write_units.load(Ordering::Relaxed),
            read_units: self.read_units.load(Ordering::Relaxed),
            write_requests: self.write_requests.load(Ordering::Relaxed),
            read_requests: self.read_requests.load(Ordering::Relaxed),
            blob_puts: self.blob_puts.load(Ordering::Relaxed),
            blob_gets: self.blob_gets.load(Ordering::Relaxed),
            blob_bytes: self.blob_bytes.load(Ordering::Relaxed),
            blob_other: self.blob_other.load(Ordering::Relaxed),
        }
    }
}
