//! [`SqliteStore`]: the store ports over one `rusqlite` connection.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde_json::Value;
use trellis_core::engine::Effect;
use trellis_core::interrupt::Vote;
use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
use trellis_core::ports::{
    CreateResult, EffectSink, HostSettings, IdempotencyClaim, IdempotencyRecord, LocalQueue, RunFilter, RunPosition,
    RunStore, StoredEvent, StoredWorkflow, Task, WorkflowStore,
};
use trellis_core::run::{Changes, NodeState, NodeStatus};
use trellis_core::timefmt::Millis;
use trellis_core::{RunEvent, RunState, RunStatus, StoreError};

use crate::cache::HotRuns;
use crate::records::{read_run, Depth, RunRows};
use crate::schema::{ddl, Step, MIGRATIONS, SCHEMA_VERSION};
use crate::usage::{Counters, RowUsage};
use crate::writer::{event_rows, insert_tasks, task_rows, without_fsync, Answer, Write, Writer};

/// Expired idempotency records deleted per claim (the opportunistic part of their expiry).
const PRUNE_BATCH: i64 = 64;

/// The embedded store. Operations are short and run under one connection lock.
pub struct SqliteStore {
    /// Declared first: dropped first, so its thread has let go of the connection before the
    /// connection closes (a reopen of the file right after succeeds).
    pub(crate) writer: Writer,
    pub(crate) connection: Arc<Mutex<Connection>>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) hot: Arc<HotRuns>,
}

fn system_now() -> Millis {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Deletes up to `limit` finished idempotency records older than the retention at `now`.
fn prune_idempotency(connection: &Connection, now: Millis, limit: i64) -> Result<usize, StoreError> {
    connection
        .prepare_cached(
            "DELETE FROM idempotency WHERE (tenant, endpoint, key) IN (
                 SELECT tenant, endpoint, key FROM idempotency
                 WHERE state = 'completed' AND created_at <= ?1 LIMIT ?2)",
        )
        .map_err(unavailable)?
        .execute(params![now.saturating_sub(IDEMPOTENCY_RETENTION_MS), limit])
        .map_err(unavailable)
}

pub(crate) fn unavailable(error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable("the database is locked by another process".to_owned())
        }
        _ => StoreError::Unavailable(error.to_string()),
    }
}

/// A run write answered as only a host record write can: a bug in the writer.
fn record_answer() -> StoreError {
    StoreError::Corrupt("a run write got a host record's answer".to_owned())
}

pub(crate) fn corrupt(error: serde_json::Error) -> StoreError {
    StoreError::Corrupt(error.to_string())
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(corrupt)
}

/// Prepared statements kept per connection (more than the statements the store uses).
const STATEMENT_CACHE_CAPACITY: usize = 64;

impl SqliteStore {
    /// Events of `run_id` with `sequence > after` (all when `None`), in order, at most
    /// `limit`, each as stored and then through `each`.
    fn read_events<T>(
        &self,
        run_id: &str,
        after: Option<u64>,
        limit: usize,
        mut each: impl FnMut(StoredEvent) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let (stored, bytes) = crate::pages::read(&self.lock(), run_id, after, limit)?;
        let mut events = Vec::with_capacity(stored.len());
        for event in stored {
            events.push(each(event)?);
        }
        self.counters.read(events.len() as u64, bytes);
        Ok(events)
    }

    /// Opens (creating if needed) the database file at `path`, in WAL mode with full
    /// synchronous commits and exclusive locking; releases task leases left by a previous
    /// process.
    ///
    /// `temp_store = MEMORY`: each write of a group commit runs in its own savepoint, and
    /// SQLite keeps the prior image of every page a savepoint changes in a statement journal
    /// so it can roll that write back alone. That journal is scratch space, never needed
    /// after a crash (the transaction is either in the WAL whole or not at all): kept in
    /// memory, it costs no file write per page (it was ~2 `pwrite`s per step to a temp file).
    ///
    /// `cache_size = -1024`: a 1 MiB page cache (SQLite's default is 2 MiB). Steps append at the
    /// right edge of each B-tree and read back what was just written, so the pages they touch
    /// stay cached in either; the smaller cache keeps the host inside its memory budget
    /// (`trellis-bench --mode rss`).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let connection = Connection::open(path).map_err(unavailable)?;
        connection.busy_timeout(std::time::Duration::from_millis(250)).map_err(unavailable)?;
        connection
            .execute_batch(
                "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
                 PRAGMA temp_store = MEMORY; PRAGMA cache_size = -1024;",
            )
            .map_err(unavailable)?;
        Self::init(connection)
    }

    /// A throw-away in-memory database.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory().map_err(unavailable)?)
    }

    fn init(connection: Connection) -> Result<Self, StoreError> {
        // Query-planner stability: SQLite (3.54) otherwise marks a statement whose `LIMIT` is a
        // bound parameter (events_after, claim_due, list_runs) to be re-prepared at every
        // rebind, so each cached statement was parsed and planned again on every execution.
        // No query here relies on a plan that depends on a bound value (no partial indexes).
        connection.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map_err(unavailable)?;
        // Every statement of a step's reads and commit stays prepared (rusqlite keeps 16 by
        // default; the hot path uses more, so the least recent were finalized and prepared
        // again on each run).
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        let found: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(unavailable)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::Corrupt(format!(
                "the database has layout version {found}; this build reads version {SCHEMA_VERSION} and older"
            )));
        }
        if found == 0 {
            // A new file: incremental vacuum from its first page on (no VACUUM needed).
            connection.execute_batch("PRAGMA auto_vacuum = INCREMENTAL;").map_err(unavailable)?;
        }
        if found != 0 && found < SCHEMA_VERSION {
            migrate(&connection, found)?;
        }
        connection.execute_batch(&ddl()).map_err(unavailable)?;
        connection.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(unavailable)?;
        crate::removal::ensure_incremental_vacuum(&connection)?;
        // Taking the write lock here makes a second process on the same file fail at open.
        connection.execute("UPDATE tasks SET leased_until = NULL", []).map_err(unavailable)?;
        // The data directory is held by one process at a time, so every claim still pending
        // belonged to a process that is gone: free its keys now rather than after its lease.
        connection.execute("DELETE FROM idempotency WHERE state = 'pending'", []).map_err(unavailable)?;
        prune_idempotency(&connection, system_now(), i64::MAX)?;
        crate::host_records::prune(&connection, system_now(), i64::MAX)?;
        let connection = Arc::new(Mutex::new(connection));
        let (counters, hot) = (Arc::new(Counters::default()), Arc::new(HotRuns::default()));
        let writer = Writer::start(connection.clone(), counters.clone(), hot.clone());
        Ok(Self { writer, connection, counters, hot })
    }

    /// Rows and document bytes read and written so far (see [`RowUsage`]).
    pub fn usage(&self) -> RowUsage {
        self.counters.usage()
    }

    /// Row counts of every table, for diagnostics and for tests that check a refused request
    /// persisted nothing.
    pub fn table_counts(&self) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let connection = self.lock();
        ["workflows", "runs", "events", "idempotency", "tasks", "votes", "records"]
            .into_iter()
            .map(|table| {
                if table == "events" {
                    return Ok((table, crate::pages::count(&connection)?));
                }
                let count = connection
                    .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| row.get::<_, u64>(0))
                    .map_err(unavailable)?;
                Ok((table, count))
            })
            .collect()
    }

    fn read(&self, run_id: &str, depth: Depth) -> Result<Option<RunState>, StoreError> {
        let found = read_run(&self.lock(), run_id, depth)?;
        Ok(found.map(|(run, read)| {
            self.counters.read(read.0, read.1);
            run
        }))
    }

    /// Up to `limit` runs whose retention ran out by `now`, oldest first: what the host's
    /// sweeper deletes (`trellis_core::retention`).
    pub fn expired_runs(&self, now: Millis, limit: usize) -> Result<Vec<String>, StoreError> {
        crate::removal::expired(&self.lock(), now, limit)
    }

    /// The database file's `auto_vacuum` mode (2: incremental), for the layout tests.
    pub fn auto_vacuum_mode(&self) -> Result<i64, StoreError> {
        self.lock().query_row("PRAGMA auto_vacuum", [], |row| row.get(0)).map_err(unavailable)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Brings a database of layout `found` to [`SCHEMA_VERSION`] in one transaction: a crash
/// or an error midway leaves it as it was.
fn migrate(connection: &Connection, found: i64) -> Result<(), StoreError> {
    connection.execute_batch("BEGIN IMMEDIATE").map_err(unavailable)?;
    let steps = || -> Result<(), StoreError> {
        // The conversions below write run rows in today's shape, `retains_until` included.
        crate::schema::add_retains_until(connection)?;
        for (from, step) in MIGRATIONS.iter().filter(|(from, _)| *from >= found) {
            let failed = |error: String| {
                StoreError::Corrupt(format!("migrating the database from layout version {from}: {error}"))
            };
            match step {
                Step::Sql(statements) => connection.execute_batch(statements).map_err(|e| failed(e.to_string()))?,
                Step::Convert(convert) => {
                    connection.execute_batch(&ddl()).map_err(|e| failed(e.to_string()))?;
                    convert(connection).map_err(|e| failed(e.to_string()))?;
                }
            }
        }
        connection.execute_batch(&ddl()).map_err(unavailable)?;
        connection.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(unavailable)
    };
    match steps() {
        Ok(()) => connection.execute_batch("COMMIT").map_err(unavailable),
        Err(error) => {
            let _ = connection.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

pub(crate) fn find_record(
    connection: &Connection,
    tenant: &str,
    endpoint: &str,
    key: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    let row = connection
        .query_row(
            "SELECT request_digest, status, body, created_at FROM idempotency
             WHERE tenant = ?1 AND endpoint = ?2 AND key = ?3 AND state = 'completed'",
            params![tenant, endpoint, key],
            |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, u16>(1)?, row.get::<_, String>(2)?, row.get::<_, u64>(3)?))
            },
        )
        .optional()
        .map_err(unavailable)?;
    row.map(|(request_digest, status, body, created_at)| {
        Ok(IdempotencyRecord {
            tenant: tenant.to_owned(),
            endpoint: endpoint.to_owned(),
            key: key.to_owned(),
            request_digest,
            status,
            body: serde_json::from_str(&body).map_err(corrupt)?,
            created_at,
        })
    })
    .transpose()
}

fn stored_workflow(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, String, String)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}

fn decode_workflow(
    row: Option<(String, String, String, String, String)>,
) -> Result<Option<StoredWorkflow>, StoreError> {
    row.map(|(namespace, workflow_id, version, content_hash, document)| {
        Ok(StoredWorkflow {
            namespace,
            workflow_id,
            version,
            content_hash,
            document: serde_json::from_str(&document).map_err(corrupt)?,
        })
    })
    .transpose()
}

/// The newest workflow row of `(namespace, workflow_id)` that also matches `extra` (a
/// condition on `?3`, or none).
fn newest_workflow(
    connection: &Connection,
    counters: &Counters,
    namespace: &str,
    workflow_id: &str,
    extra: Option<(&str, &str)>,
) -> Result<Option<StoredWorkflow>, StoreError> {
    let condition = extra.map(|(column, _)| format!(" AND {column} = ?3")).unwrap_or_default();
    let sql = format!(
        "SELECT namespace, workflow_id, version, content_hash, document FROM workflows
         WHERE namespace = ?1 AND workflow_id = ?2{condition} ORDER BY seq DESC LIMIT 1"
    );
    let row = match extra {
        Some((_, value)) => connection.query_row(&sql, params![namespace, workflow_id, value], stored_workflow),
        None => connection.query_row(&sql, params![namespace, workflow_id], stored_workflow),
    };
    let row = row.optional().map_err(unavailable)?;
    if let Some(row) = &row {
        counters.read(1, row.4.len());
    }
    decode_workflow(row)
}

#[async_trait]
impl WorkflowStore for SqliteStore {
    async fn put_workflow(&self, workflow: &StoredWorkflow, now: Millis) -> Result<(), StoreError> {
        let connection = self.lock();
        connection
            .execute(
                "INSERT INTO workflows (namespace, workflow_id, version, content_hash, document, registered_at, seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows))
                 ON CONFLICT (namespace, workflow_id, content_hash) DO UPDATE SET seq = excluded.seq",
                params![
                    workflow.namespace,
                    workflow.workflow_id,
                    workflow.version,
                    workflow.content_hash,
                    to_json(&workflow.document)?,
                    now
                ],
            )
            .map_err(unavailable)?;
        Ok(())
    }

    async fn latest_workflow(&self, namespace: &str, workflow_id: &str) -> Result<Option<StoredWorkflow>, StoreError> {
        newest_workflow(&self.lock(), &self.counters, namespace, workflow_id, None)
    }

    async fn latest_workflow_hash(&self, namespace: &str, workflow_id: &str) -> Result<Option<String>, StoreError> {
        let connection = self.lock();
        let hash = connection
            .prepare_cached(
                "SELECT content_hash FROM workflows WHERE namespace = ?1 AND workflow_id = ?2 ORDER BY seq DESC LIMIT 1",
            )
            .map_err(unavailable)?
            .query_row(params![namespace, workflow_id], |row| row.get::<_, String>(0))
            .optional()
            .map_err(unavailable)?;
        self.counters.read(u64::from(hash.is_some()), 0);
        Ok(hash)
    }

    async fn workflow_version(
        &self,
        namespace: &str,
        workflow_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError> {
        newest_workflow(&self.lock(), &self.counters, namespace, workflow_id, Some(("content_hash", content_hash)))
    }

    async fn workflow_by_label(
        &self,
        namespace: &str,
        workflow_id: &str,
        version: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError> {
        newest_workflow(&self.lock(), &self.counters, namespace, workflow_id, Some(("version", version)))
    }

    async fn workflow_ids(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        let connection = self.lock();
        let mut query = connection
            .prepare_cached("SELECT DISTINCT workflow_id FROM workflows WHERE namespace = ?1 ORDER BY workflow_id")
            .map_err(unavailable)?;
        let ids = query.query_map([namespace], |row| row.get::<_, String>(0)).map_err(unavailable)?;
        ids.collect::<Result<_, _>>().map_err(unavailable)
    }
}

#[async_trait]
impl HostSettings for SqliteStore {
    async fn setting(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let connection = self.lock();
        let mut query = connection.prepare_cached("SELECT value FROM settings WHERE key = ?1").map_err(unavailable)?;
        let text: Option<String> = query.query_row([key], |row| row.get(0)).optional().map_err(unavailable)?;
        text.map(|text| serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))).transpose()
    }

    async fn put_setting(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        let connection = self.lock();
        connection
            .prepare_cached("INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            .map_err(unavailable)?
            .execute(params![key, value.to_string()])
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(
        &self,
        run: &RunState,
        events: &[RunEvent],
        effects: &[Effect],
        idempotency: Option<&IdempotencyRecord>,
    ) -> Result<CreateResult, StoreError> {
        let write = Write::Create {
            run: RunRows::of(run, &Changes::all())?,
            events: event_rows(events)?,
            tasks: task_rows(&run.run_id, effects)?,
            idempotency: idempotency
                .map(|record| Ok::<_, StoreError>((record.clone(), to_json(&record.body)?)))
                .transpose()?,
        };
        match self.writer.write(write).await? {
            Answer::Done => {}
            Answer::Existing(record) => return Ok(CreateResult::Existing(record)),
            Answer::Conflict => return Err(StoreError::Conflict),
            Answer::Version(_) | Answer::Deleted(_) | Answer::Freed(_) => return Err(record_answer()),
        }
        Ok(CreateResult::Created)
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        if let Some(run) = self.hot.copy(run_id) {
            return Ok(Some(run));
        }
        self.read(run_id, Depth::Full)
    }

    async fn load_run_summary(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        if let Some(run) = self.hot.summary(run_id) {
            return Ok(Some(run));
        }
        self.read(run_id, Depth::Summary)
    }

    async fn take_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        if let Some(run) = self.hot.take(run_id) {
            return Ok(Some(run));
        }
        self.read(run_id, Depth::Full)
    }

    fn retain_run(&self, run: RunState) {
        // Only a run whose next input is on its way is worth keeping: one with a step or an
        // attempt in flight. A finished run gets none, and a run parked on a person, a timer
        // or a child may wait for hours.
        let busy = |node: &NodeState| matches!(node.status, NodeStatus::Scheduled | NodeStatus::Executing);
        if run.status != RunStatus::Running || !run.nodes.values().any(busy) {
            return;
        }
        // Under the connection lock no commit can slip between the check and the keeping.
        let connection = self.lock();
        let stored = connection
            .prepare_cached("SELECT version FROM runs WHERE run_id = ?1")
            .and_then(|mut query| query.query_row([&run.run_id], |row| row.get::<_, u64>(0)).optional());
        if let Ok(Some(version)) = stored {
            if version == run.version {
                self.hot.keep(run);
            }
        }
    }

    async fn commit(
        &self,
        run: &RunState,
        expected_version: u64,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        self.commit_changes(run, expected_version, &Changes::all(), events, effects).await
    }

    async fn commit_changes(
        &self,
        run: &RunState,
        expected_version: u64,
        changes: &Changes,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        if run.version != expected_version.saturating_add(1) {
            return Err(StoreError::VersionSkip { expected: expected_version, found: run.version });
        }
        let write = Write::Commit {
            run: RunRows::of(run, changes)?,
            expected_version,
            events: event_rows(events)?,
            tasks: task_rows(&run.run_id, effects)?,
        };
        match self.writer.write(write).await? {
            Answer::Done => {}
            Answer::Conflict | Answer::Existing(_) => return Err(StoreError::Conflict),
            Answer::Version(_) | Answer::Deleted(_) | Answer::Freed(_) => return Err(record_answer()),
        }
        Ok(())
    }

    async fn events_after(&self, run_id: &str, after: Option<u64>, limit: usize) -> Result<Vec<RunEvent>, StoreError> {
        self.read_events(run_id, after, limit, |event| {
            let payload: Value = serde_json::from_str(&event.payload_json).map_err(corrupt)?;
            let StoredEvent { sequence, event_type, node_id, timestamp, causation, .. } = event;
            Ok(RunEvent { sequence, event_type, node_id, payload, timestamp, causation })
        })
    }

    /// The payload column is the text `serde_json` wrote from the event's payload value
    /// (`writer::event_rows`: compact, keys sorted, as the value writes again once parsed),
    /// so it is handed over as read.
    async fn events_after_json(
        &self,
        run_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read_events(run_id, after, limit, Ok)
    }

    async fn vote(&self, run_id: &str, interrupt_id: &str, voter: &str) -> Result<Option<Vote>, StoreError> {
        let connection = self.lock();
        let vote = connection
            .prepare_cached(
                "SELECT action, decided_by, at FROM votes WHERE run_id = ?1 AND interrupt_id = ?2 AND voter = ?3",
            )
            .map_err(unavailable)?
            .query_row(params![run_id, interrupt_id, voter], |row| {
                Ok(Vote { voter: voter.to_owned(), action: row.get(0)?, decided_by: row.get(1)?, at: row.get(2)? })
            })
            .optional()
            .map_err(unavailable)?;
        self.counters.read(u64::from(vote.is_some()), 0);
        Ok(vote)
    }

    async fn claim_idempotency(
        &self,
        tenant: &str,
        endpoint: &str,
        key: &str,
        request_digest: &str,
        now: Millis,
        lease_until: Millis,
    ) -> Result<IdempotencyClaim, StoreError> {
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(unavailable)?;
        // Takes over a claim whose lease ended, or a finished record past the retention.
        let claimed = tx
            .prepare_cached(
                "INSERT INTO idempotency (tenant, endpoint, key, request_digest, state, lease_until, created_at)
                 VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6)
                 ON CONFLICT (tenant, endpoint, key) DO UPDATE SET
                     request_digest = excluded.request_digest, lease_until = excluded.lease_until,
                     created_at = excluded.created_at, state = 'pending', status = NULL, body = NULL
                 WHERE (idempotency.state = 'pending' AND idempotency.lease_until <= ?6)
                    OR (idempotency.state = 'completed' AND idempotency.created_at <= ?7)",
            )
            .map_err(unavailable)?
            .execute(params![
                tenant,
                endpoint,
                key,
                request_digest,
                lease_until,
                now,
                now.saturating_sub(IDEMPOTENCY_RETENTION_MS)
            ])
            .map_err(unavailable)?;
        self.counters.wrote(claimed as u64, 0);
        let outcome = if claimed == 1 {
            IdempotencyClaim::Claimed
        } else if let Some(record) = find_record(&tx, tenant, endpoint, key)? {
            IdempotencyClaim::Completed(record)
        } else {
            let holder = tx
                .query_row(
                    "SELECT request_digest FROM idempotency WHERE tenant = ?1 AND endpoint = ?2 AND key = ?3",
                    params![tenant, endpoint, key],
                    |row| row.get::<_, String>(0),
                )
                .map_err(unavailable)?;
            IdempotencyClaim::InFlight { request_digest: holder }
        };
        // The opportunistic part of the expiry: a bounded batch per claim.
        prune_idempotency(&tx, now, PRUNE_BATCH)?;
        tx.commit().map_err(unavailable)?;
        Ok(outcome)
    }

    async fn complete_idempotency(&self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE idempotency SET state = 'completed', status = ?4, body = ?5, lease_until = NULL, created_at = ?6
                 WHERE tenant = ?1 AND endpoint = ?2 AND key = ?3 AND state = 'pending'",
                params![
                    record.tenant,
                    record.endpoint,
                    record.key,
                    record.status,
                    to_json(&record.body)?,
                    record.created_at
                ],
            )
            .map_err(unavailable)?;
        Ok(())
    }

    async fn abandon_idempotency(&self, tenant: &str, endpoint: &str, key: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "DELETE FROM idempotency WHERE tenant = ?1 AND endpoint = ?2 AND key = ?3 AND state = 'pending'",
                params![tenant, endpoint, key],
            )
            .map_err(unavailable)?;
        Ok(())
    }

    async fn pending_effects(&self, run_id: &str) -> Result<Vec<Effect>, StoreError> {
        let connection = self.lock();
        let mut query = connection
            .prepare_cached("SELECT effect FROM tasks WHERE run_id = ?1 ORDER BY task_id")
            .map_err(unavailable)?;
        let rows = query.query_map([run_id], |row| row.get::<_, String>(0)).map_err(unavailable)?;
        let mut effects = Vec::new();
        for row in rows {
            effects.push(serde_json::from_str(&row.map_err(unavailable)?).map_err(corrupt)?);
        }
        Ok(effects)
    }

    async fn delete_run(&self, run_id: &str) -> Result<u64, StoreError> {
        match self.writer.write(Write::Delete(run_id.to_owned())).await? {
            Answer::Freed(bytes) => Ok(bytes),
            _ => Err(StoreError::Corrupt("a delete got another write's answer".to_owned())),
        }
    }

    async fn run_bytes(&self, run_id: &str) -> Result<u64, StoreError> {
        crate::removal::bytes(&self.lock(), run_id)
    }

    async fn reclaim_space(&self) -> Result<(), StoreError> {
        crate::removal::reclaim(&self.lock())
    }

    async fn list_runs(
        &self,
        tenant: &str,
        filter: &RunFilter,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> Result<Vec<RunState>, StoreError> {
        let connection = self.lock();
        let mut query = connection
            .prepare_cached(
                "SELECT run_id FROM runs
                 WHERE tenant = ?1
                   AND (?2 IS NULL OR workflow_id = ?2)
                   AND (?3 IS NULL OR status = ?3)
                   AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND run_id < ?5))
                 ORDER BY created_at DESC, run_id DESC LIMIT ?6",
            )
            .map_err(unavailable)?;
        let rows = query
            .query_map(
                params![
                    tenant,
                    filter.workflow_id,
                    filter.status.map(|status| status.as_str()),
                    after.map(|position| position.created_at),
                    after.map(|position| position.run_id.as_str()),
                    limit as i64
                ],
                |row| row.get::<_, String>(0),
            )
            .map_err(unavailable)?;
        let ids = rows.collect::<Result<Vec<_>, _>>().map_err(unavailable)?;
        let mut runs = Vec::with_capacity(ids.len());
        for run_id in ids {
            let (run, read) = read_run(&connection, &run_id, Depth::Summary)?
                .ok_or_else(|| StoreError::Corrupt(format!("run {run_id} vanished while listed")))?;
            self.counters.read(read.0, read.1);
            runs.push(run);
        }
        Ok(runs)
    }
}

#[async_trait]
impl EffectSink for SqliteStore {
    async fn send(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError> {
        insert_tasks(&self.lock(), run_id, &task_rows(run_id, effects)?).map(|_| ())
    }

    /// The commit itself wrote these effects as task rows: nothing to send.
    async fn send_committed(&self, _run_id: &str, _version: u64, _effects: &[Effect]) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl LocalQueue for SqliteStore {
    /// A claim (lease and delivery count) is written without its own fsync
    /// ([`without_fsync`]): it survives the process being killed, so a task that crashes the
    /// host still runs out of deliveries, and after a power loss (which releases every lease
    /// anyway) at worst one delivery goes uncounted.
    async fn claim_due(&self, now: Millis, lease_ms: u64, max: usize) -> Result<Vec<Task>, StoreError> {
        let connection = self.lock();
        without_fsync(&connection, |connection| claim_due(connection, now, lease_ms, max))
    }

    /// Without its own fsync, as acknowledgement groups ([`without_fsync`]): a lost one only
    /// redelivers a finished task.
    async fn ack(&self, task_id: &str) -> Result<(), StoreError> {
        without_fsync(&self.lock(), |connection| {
            connection.execute("DELETE FROM tasks WHERE task_id = ?1", [task_id]).map_err(unavailable)
        })?;
        Ok(())
    }

    async fn ack_many(&self, task_ids: &[String]) -> Result<(), StoreError> {
        if task_ids.is_empty() {
            return Ok(());
        }
        self.writer.write(Write::Ack(task_ids.to_vec())).await.map(|_| ())
    }

    async fn release(&self, task_id: &str, visible_at: Millis) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE tasks SET due_at = ?1, leased_until = NULL WHERE task_id = ?2",
                params![visible_at, task_id],
            )
            .map_err(unavailable)?;
        Ok(())
    }

    async fn next_visible_at(&self) -> Result<Option<Millis>, StoreError> {
        self.lock()
            .query_row("SELECT MIN(COALESCE(MAX(due_at, leased_until), due_at)) FROM tasks", [], |row| {
                row.get::<_, Option<u64>>(0)
            })
            .map_err(unavailable)
    }
}

/// Leases up to `max` tasks due at `now` for `lease_ms` (one more delivery each), in due order.
fn claim_due(connection: &Connection, now: Millis, lease_ms: u64, max: usize) -> Result<Vec<Task>, StoreError> {
    let mut claim = connection
        .prepare_cached(
            "UPDATE tasks SET leased_until = ?1, deliveries = deliveries + 1
             WHERE task_id IN (
                 SELECT task_id FROM tasks
                 WHERE due_at <= ?2 AND (leased_until IS NULL OR leased_until <= ?2)
                 ORDER BY due_at LIMIT ?3)
             RETURNING task_id, run_id, effect, deliveries, due_at",
        )
        .map_err(unavailable)?;
    let rows = claim
        .query_map(params![now.saturating_add(lease_ms), now, max as i64], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, u32>(3)?,
                row.get::<_, u64>(4)?,
            ))
        })
        .map_err(unavailable)?;
    let mut tasks = Vec::new();
    for row in rows {
        let (id, run_id, effect, deliveries, due_at) = row.map_err(unavailable)?;
        let effect: Effect = serde_json::from_str(&effect).map_err(corrupt)?;
        tasks.push((due_at, Task { id, run_id, effect, deliveries }));
    }
    tasks.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
    Ok(tasks.into_iter().map(|(_, task)| task).collect())
}
