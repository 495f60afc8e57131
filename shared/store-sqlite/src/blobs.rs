//! A run's blobs (`trellis_core::blob`): rows of `run_blobs` (layout 8), written through
//! the group commit before the commit that refers to them, read on one connection, deleted
//! with the run's other rows (`removal`).

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use trellis_core::blob::Blob;
use trellis_core::ports::BlobStore;
use trellis_core::{RunState, StoreError};

use crate::store::{unavailable, SqliteStore};
use crate::writer::{Answer, Write};

/// Stores run `run_id`'s blobs (a blob already there stays: it is the same content).
pub(crate) fn put_blobs(connection: &Connection, run_id: &str, blobs: &[(String, Vec<u8>)]) -> Result<(), StoreError> {
    let mut insert = connection
        .prepare_cached("INSERT OR IGNORE INTO run_blobs (run_id, reference, bytes) VALUES (?1, ?2, ?3)")
        .map_err(unavailable)?;
    for (reference, bytes) in blobs {
        insert.execute(params![run_id, reference, bytes]).map_err(unavailable)?;
    }
    Ok(())
}

/// The bytes of run `run_id`'s blob `reference`.
pub(crate) fn blob(connection: &Connection, run_id: &str, reference: &str) -> Result<Option<Vec<u8>>, StoreError> {
    connection
        .prepare_cached("SELECT bytes FROM run_blobs WHERE run_id = ?1 AND reference = ?2")
        .map_err(unavailable)?
        .query_row(params![run_id, reference], |row| row.get(0))
        .optional()
        .map_err(unavailable)
}

#[async_trait]
impl BlobStore for SqliteStore {
    async fn put_blobs(&self, run: &RunState, blobs: &[Blob]) -> Result<(), StoreError> {
        if blobs.is_empty() {
            return Ok(());
        }
        let blobs = blobs.iter().map(|blob| (blob.reference.clone(), blob.bytes.clone())).collect();
        match self.writer.write(Write::Blobs { run_id: run.run_id.clone(), blobs }).await? {
            Answer::Done => Ok(()),
            _ => Err(StoreError::Corrupt("a blob write got another write's answer".to_owned())),
        }
    }

    async fn blob(&self, run_id: &str, reference: &str) -> Result<Option<Vec<u8>>, StoreError> {
        blob(&self.lock(), run_id, reference)
    }
}
