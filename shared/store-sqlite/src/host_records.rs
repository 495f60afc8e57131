//! Host records (layout 6): the `records` table behind [`RecordStore`] — the host's own
//! bookkeeping beside runs (subscriptions, deliveries, schedules), one row per
//! `(kind, scope, key)` with a version, a JSON value and an optional expiry.
//!
//! Writes go through the group committer ([`crate::writer`]) like run commits: each is
//! decided inside the writer's transaction — the live version is read, the condition
//! ([`Expect`]) checked, and only then is anything written — so a write whose condition fails
//! writes nothing, and two writers expecting the same version are serialized by the one
//! writer thread: exactly one wins. A record whose `expires_at` has passed is absent to every
//! read and condition (a write over it starts again at version 1); a put deletes a bounded
//! batch of lapsed records ([`PRUNE_BATCH`]) and the open deletes all of them.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use trellis_core::ports::{Expect, Record, RecordStore};
use trellis_core::timefmt::Millis;
use trellis_core::StoreError;

use crate::records::Written;
use crate::store::{corrupt, to_json, unavailable, SqliteStore};
use crate::writer::{Answer, Write};

/// Lapsed records deleted per put (the opportunistic part of their expiry).
const PRUNE_BATCH: i64 = 16;

/// What a record write does, serialized before it is queued.
#[derive(Debug)]
pub(crate) struct RecordWrite {
    kind: String,
    scope: String,
    key: String,
    /// The value's JSON text, or `None` for a delete.
    value: Option<String>,
    expires_at: Option<Millis>,
    expect: Expect,
    now: Millis,
}

/// Refuses names the serverless store could not keep apart or store (`kind` separates the
/// partition key from `scope` with `#`; DynamoDB has no empty key), so both stores accept the
/// same records.
pub(crate) fn check_names(kind: &str, key: Option<&str>) -> Result<(), StoreError> {
    if kind.is_empty() || kind.contains('#') {
        return Err(StoreError::LimitExceeded(format!("a record kind must be non-empty without '#': {kind:?}")));
    }
    if key.is_some_and(str::is_empty) {
        return Err(StoreError::LimitExceeded("a record key must not be empty".to_owned()));
    }
    Ok(())
}

/// The version of the live record `(kind, scope, key)` at `now`.
fn live_version(connection: &Connection, write: &RecordWrite) -> Result<Option<u64>, StoreError> {
    connection
        .prepare_cached(
            "SELECT version FROM records
             WHERE kind = ?1 AND scope = ?2 AND key = ?3 AND (expires_at IS NULL OR expires_at > ?4)",
        )
        .map_err(unavailable)?
        .query_row(params![write.kind, write.scope, write.key, write.now], |row| row.get::<_, u64>(0))
        .optional()
        .map_err(unavailable)
}

/// Applies one record write inside the writer's transaction: checks its condition against
/// the live record before writing anything ([`Answer::Conflict`] when it fails).
pub(crate) fn apply(connection: &Connection, write: &RecordWrite) -> Result<(Answer, Written), StoreError> {
    let live = live_version(connection, write)?;
    let holds = match write.expect {
        Expect::Any => true,
        Expect::Absent => live.is_none(),
        Expect::Version(version) => live == Some(version),
    };
    let Some(value) = &write.value else {
        // A delete. `Absent` deletes nothing: it holds only when there is nothing to delete.
        return Ok(match (holds, write.expect) {
            (false, _) => (Answer::Conflict, (0, 0)),
            (true, Expect::Absent) => (Answer::Deleted(false), (0, 0)),
            (true, _) => {
                // A lapsed row is deleted too (it was absent already).
                let deleted = connection
                    .prepare_cached("DELETE FROM records WHERE kind = ?1 AND scope = ?2 AND key = ?3")
                    .map_err(unavailable)?
                    .execute(params![write.kind, write.scope, write.key])
                    .map_err(unavailable)?;
                (Answer::Deleted(live.is_some()), (deleted as u64, 0))
            }
        });
    };
    if !holds {
        return Ok((Answer::Conflict, (0, 0)));
    }
    let version = live.map_or(1, |version| version + 1);
    connection
        .prepare_cached(
            "INSERT INTO records (kind, scope, key, version, value, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (kind, scope, key) DO UPDATE SET
                 version = excluded.version, value = excluded.value, expires_at = excluded.expires_at",
        )
        .map_err(unavailable)?
        .execute(params![write.kind, write.scope, write.key, version, value, write.expires_at])
        .map_err(unavailable)?;
    let pruned = prune(connection, write.now, PRUNE_BATCH)?;
    Ok((Answer::Version(version), (1 + pruned as u64, value.len())))
}

/// Deletes up to `limit` records lapsed at `now`.
pub(crate) fn prune(connection: &Connection, now: Millis, limit: i64) -> Result<usize, StoreError> {
    connection
        .prepare_cached(
            "DELETE FROM records WHERE (kind, scope, key) IN (
                 SELECT kind, scope, key FROM records WHERE expires_at <= ?1 LIMIT ?2)",
        )
        .map_err(unavailable)?
        .execute(params![now, limit])
        .map_err(unavailable)
}

/// A row of `records` as read: `(key, version, value, expires_at)`.
type Row = (String, u64, String, Option<Millis>);

fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn decode(kind: &str, scope: &str, (key, version, value, expires_at): Row) -> Result<Record, StoreError> {
    let value: Value = serde_json::from_str(&value).map_err(corrupt)?;
    Ok(Record { kind: kind.to_owned(), scope: scope.to_owned(), key, version, value, expires_at })
}

impl SqliteStore {
    async fn write_record(&self, write: RecordWrite) -> Result<Answer, StoreError> {
        check_names(&write.kind, Some(&write.key))?;
        self.writer.write(Write::Record(write)).await
    }
}

#[async_trait]
impl RecordStore for SqliteStore {
    async fn record(&self, kind: &str, scope: &str, key: &str, now: Millis) -> Result<Option<Record>, StoreError> {
        check_names(kind, Some(key))?;
        let found = self
            .lock()
            .prepare_cached(
                "SELECT key, version, value, expires_at FROM records
                 WHERE kind = ?1 AND scope = ?2 AND key = ?3 AND (expires_at IS NULL OR expires_at > ?4)",
            )
            .map_err(unavailable)?
            .query_row(params![kind, scope, key, now], row)
            .optional()
            .map_err(unavailable)?;
        if let Some(found) = &found {
            self.counters.read(1, found.2.len());
        }
        found.map(|found| decode(kind, scope, found)).transpose()
    }

    async fn put_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        value: &Value,
        expires_at: Option<Millis>,
        expect: Expect,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let write = RecordWrite {
            kind: kind.to_owned(),
            scope: scope.to_owned(),
            key: key.to_owned(),
            value: Some(to_json(value)?),
            expires_at,
            expect,
            now,
        };
        match self.write_record(write).await? {
            Answer::Version(version) => Ok(version),
            Answer::Conflict => Err(StoreError::Conflict),
            other => Err(StoreError::Corrupt(format!("a record put answered {other:?}"))),
        }
    }

    async fn delete_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        expect: Expect,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let write = RecordWrite {
            kind: kind.to_owned(),
            scope: scope.to_owned(),
            key: key.to_owned(),
            value: None,
            expires_at: None,
            expect,
            now,
        };
        match self.write_record(write).await? {
            Answer::Deleted(deleted) => Ok(deleted),
            Answer::Conflict => Err(StoreError::Conflict),
            other => Err(StoreError::Corrupt(format!("a record delete answered {other:?}"))),
        }
    }

    async fn records(
        &self,
        kind: &str,
        scope: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<Record>, StoreError> {
        check_names(kind, None)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let connection = self.lock();
        // Two statements rather than `?3 IS NULL OR key > ?3`, so a page after a key starts
        // at that key in the primary key instead of at the start of the scope.
        let rows = match after {
            Some(after) => connection
                .prepare_cached(
                    "SELECT key, version, value, expires_at FROM records
                     WHERE kind = ?1 AND scope = ?2 AND key > ?3 AND (expires_at IS NULL OR expires_at > ?4)
                     ORDER BY key LIMIT ?5",
                )
                .map_err(unavailable)?
                .query_map(params![kind, scope, after, now, limit], row)
                .map_err(unavailable)?
                .collect::<Result<Vec<_>, _>>(),
            None => connection
                .prepare_cached(
                    "SELECT key, version, value, expires_at FROM records
                     WHERE kind = ?1 AND scope = ?2 AND (expires_at IS NULL OR expires_at > ?3)
                     ORDER BY key LIMIT ?4",
                )
                .map_err(unavailable)?
                .query_map(params![kind, scope, now, limit], row)
                .map_err(unavailable)?
                .collect::<Result<Vec<_>, _>>(),
        }
        .map_err(unavailable)?;
        drop(connection);
        self.counters.read(rows.len() as u64, rows.iter().map(|row| row.2.len()).sum());
        rows.into_iter().map(|row| decode(kind, scope, row)).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_core::ports::{Expect, RecordStore};

    use crate::SqliteStore;

    #[tokio::test]
    async fn lapsed_records_are_deleted_by_later_puts_and_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trellis.db");
        let count = |store: &SqliteStore| -> i64 {
            store.lock().query_row("SELECT COUNT(*) FROM records", [], |row| row.get(0)).unwrap()
        };
        {
            let store = SqliteStore::open(&path).unwrap();
            for key in ["a", "b", "c"] {
                store.put_record("k", "s", key, &json!(1), Some(100), Expect::Any, 10).await.unwrap();
            }
            // A record lapsing at the epoch's first second: gone at the next open.
            store.put_record("k", "old", "x", &json!(1), Some(1_000), Expect::Any, 10).await.unwrap();
            assert_eq!(count(&store), 4);
            // Past their expiry: the next put deletes them (its own record stays).
            store.put_record("k", "s", "d", &json!(2), None, Expect::Any, 200).await.unwrap();
            assert_eq!(count(&store), 2, "the lapsed ones of `s` are deleted, `old` lapses at 1 000");
            store.put_record("k", "s", "e", &json!(2), None, Expect::Any, 5).await.unwrap();
            assert_eq!(count(&store), 3, "nothing lapsed at 5");
        }
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(count(&reopened), 2, "the open deletes every lapsed record");
    }

    #[tokio::test]
    async fn a_record_write_counts_its_row() {
        let store = SqliteStore::open_in_memory().unwrap();
        let before = store.usage();
        store.put_record("k", "s", "a", &json!({"x": 1}), None, Expect::Absent, 1).await.unwrap();
        let wrote = store.usage().since(&before);
        assert_eq!((wrote.rows_written, wrote.bytes_written), (1, 7));
        let before = store.usage();
        store.record("k", "s", "a", 2).await.unwrap().unwrap();
        assert_eq!(store.usage().since(&before).rows_read, 1);
    }
}
