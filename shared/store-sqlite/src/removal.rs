//! Deleting runs (`DELETE /v1/runs/{id}`, prune, the retention sweeper; see
//! `trellis_core::retention`): every row keyed by the run — its blobs too — goes in one write of the group
//! commit, and the freed pages go back to the file system afterwards (`auto_vacuum =
//! INCREMENTAL`, layout 7).

use rusqlite::{params, Connection, OptionalExtension};
use trellis_core::StoreError;

use crate::store::unavailable;

/// The tables holding rows of a run, by `run_id`, and the column whose length counts.
const TABLES: [(&str, &str); 7] = [
    ("run_blobs", "length(bytes)"),
    ("event_pages", "length(body)"),
    ("run_nodes", "length(state)"),
    ("run_variables", "length(value)"),
    ("votes", "length(voter) + length(action) + length(decided_by)"),
    ("tasks", "length(effect)"),
    ("runs", "length(state) + length(edges)"),
];

/// What run `run_id` stores, in bytes (its documents and log; `0` when it is gone).
pub(crate) fn bytes(connection: &Connection, run_id: &str) -> Result<u64, StoreError> {
    let mut total = 0u64;
    for (table, length) in TABLES {
        let sql = format!("SELECT COALESCE(SUM({length}), 0) FROM {table} WHERE run_id = ?1");
        let found: i64 = connection
            .prepare_cached(&sql)
            .map_err(unavailable)?
            .query_row([run_id], |row| row.get(0))
            .map_err(unavailable)?;
        total += u64::try_from(found).unwrap_or_default();
    }
    Ok(total)
}

/// Deletes every row of run `run_id`; the bytes it stored.
pub(crate) fn delete(connection: &Connection, run_id: &str) -> Result<u64, StoreError> {
    let freed = bytes(connection, run_id)?;
    for (table, _) in TABLES {
        let sql = format!("DELETE FROM {table} WHERE run_id = ?1");
        connection.prepare_cached(&sql).map_err(unavailable)?.execute([run_id]).map_err(unavailable)?;
    }
    Ok(freed)
}

/// Up to `limit` runs kept until `now` or earlier (their retention ran out), oldest first.
pub(crate) fn expired(connection: &Connection, now: u64, limit: usize) -> Result<Vec<String>, StoreError> {
    let mut query = connection
        .prepare_cached("SELECT run_id FROM runs WHERE retains_until <= ?1 ORDER BY retains_until LIMIT ?2")
        .map_err(unavailable)?;
    let rows = query.query_map(params![now, limit as i64], |row| row.get::<_, String>(0)).map_err(unavailable)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(unavailable)
}

/// Gives free pages back to the file system: an incremental vacuum, then a checkpoint that
/// truncates the WAL (the main file shrinks at the checkpoint).
pub(crate) fn reclaim(connection: &Connection) -> Result<(), StoreError> {
    // Each step of the pragma frees one page: step it to the end.
    let mut vacuum = connection.prepare("PRAGMA incremental_vacuum").map_err(unavailable)?;
    let mut steps = vacuum.query([]).map_err(unavailable)?;
    while steps.next().map_err(unavailable)?.is_some() {}
    drop(steps);
    let _: Option<i64> = connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
        .optional()
        .map_err(unavailable)?;
    Ok(())
}

/// Switches a file to `auto_vacuum = INCREMENTAL` (layout 7) if it is not already: for a
/// file made before, a one-time `VACUUM` (which rewrites it).
pub(crate) fn ensure_incremental_vacuum(connection: &Connection) -> Result<(), StoreError> {
    let mode: i64 = connection.query_row("PRAGMA auto_vacuum", [], |row| row.get(0)).map_err(unavailable)?;
    if mode != 2 {
        connection.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;").map_err(unavailable)?;
    }
    Ok(())
}
