//! The SQLite schema, created on open.

/// The layout version this build writes (`PRAGMA user_version`). A database of an older
/// version is migrated at open ([`MIGRATIONS`]); a newer one is refused rather than misread.
pub(crate) const SCHEMA_VERSION: i64 = 8;

/// The `votes` table (layout 3): one row per `(run, interrupt occurrence, voter)`.
const VOTES: &str = "
CREATE TABLE IF NOT EXISTS votes (
    run_id       TEXT    NOT NULL,
    interrupt_id TEXT    NOT NULL,
    voter        TEXT    NOT NULL,
    action       TEXT    NOT NULL,
    decided_by   TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    PRIMARY KEY (run_id, interrupt_id, voter)
) WITHOUT ROWID;
";

/// Finished idempotency records by age, for their expiry (layout 3).
const IDEMPOTENCY_BY_AGE: &str = "CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (state, created_at);";

/// A run's node and variable records (layout 4, see `records`).
pub(crate) const RUN_RECORDS: &str = "
CREATE TABLE IF NOT EXISTS run_nodes (
    run_id  TEXT    NOT NULL,
    node_id TEXT    NOT NULL,
    active  INTEGER NOT NULL,
    state   TEXT    NOT NULL,
    PRIMARY KEY (run_id, node_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_variables (
    run_id TEXT NOT NULL,
    name   TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
";

/// The host records (layout 6, see `host_records`): one row per `(kind, scope, key)`, listed
/// in key order within `(kind, scope)`; `expires_at` (milliseconds, `NULL` for never) is
/// indexed for the deletion of lapsed records.
pub(crate) const HOST_RECORDS: &str = "
CREATE TABLE IF NOT EXISTS records (
    kind       TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    value      TEXT    NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (kind, scope, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_expiry ON records (expires_at);
";

/// A run's blobs (layout 8, see `trellis_core::blob`): one row per `(run, reference)`, in a
/// rowid table (large rows; the index finds them).
pub(crate) const RUN_BLOBS: &str = "
CREATE TABLE IF NOT EXISTS run_blobs (
    run_id    TEXT NOT NULL,
    reference TEXT NOT NULL,
    bytes     BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS run_blobs_by_run ON run_blobs (run_id, reference);
";

/// What a migration step does.
pub(crate) enum Step {
    /// Runs these statements.
    Sql(&'static str),
    /// Creates the current layout's tables, then runs this conversion.
    Convert(fn(&rusqlite::Connection) -> Result<(), trellis_core::StoreError>),
}

/// `(from version, step)`: applied in order to databases older than [`SCHEMA_VERSION`].
/// Version 2 records each event's causation (`causationId` of dispatch events). Version 3
/// stores votes by voter instead of in the run's state (a run's state keeps a tally; the votes
/// of a layout-2 state stay in it and are still counted), and indexes idempotency records by
/// age for their expiry. A layout-3 database is refused by older builds, which would
/// miscount its votes. Version 4 splits each run's state document into a header row, edge
/// letters and node and variable rows (a step writes only what it changed); older builds
/// refuse it too. Version 5 stores the events a commit appends as pages, a row per up to 64
/// events instead of a row per event (see `pages`); older builds refuse it. Version 6 adds the
/// host records (`records`, see `host_records`); older builds refuse it too (they would not
/// know the records a host keeps there). Version 7 records until when each run is kept
/// (`retains_until`) and keeps the file in `auto_vacuum = INCREMENTAL`; older builds refuse it
/// (they would not keep `retains_until` up to date). Version 8 adds the runs' blobs
/// (`run_blobs`); older builds refuse it (they would read a spilled value's reference as
/// the value).
pub(crate) const MIGRATIONS: &[(i64, Step)] = &[
    (1, Step::Sql("ALTER TABLE events ADD COLUMN causation INTEGER;")),
    (2, Step::Sql(VOTES)),
    (3, Step::Convert(crate::records::split_state_documents)),
    (4, Step::Convert(crate::pages::convert_event_rows)),
    (5, Step::Sql(HOST_RECORDS)),
    (6, Step::Convert(add_retains_until)),
    (7, Step::Sql(RUN_BLOBS)),
];

/// Layout 7: until when each ended run is kept (see `trellis_core::retention`; the sweeper
/// reads it). Added first of all by a migration (the conversions of older layouts write run
/// rows in today's shape), and by this step for a layout-6 file; idempotent.
/// The same layout turns `auto_vacuum` to `INCREMENTAL` (a one-time `VACUUM` at open, see
/// `removal::ensure_incremental_vacuum`) so that deleted runs give their pages back.
pub(crate) fn add_retains_until(connection: &rusqlite::Connection) -> Result<(), trellis_core::StoreError> {
    let unavailable = |error: rusqlite::Error| trellis_core::StoreError::Unavailable(error.to_string());
    let has = connection
        .prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'retains_until'")
        .and_then(|mut query| query.exists([]))
        .map_err(unavailable)?;
    let table = connection
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'")
        .and_then(|mut query| query.exists([]))
        .map_err(unavailable)?;
    // No `runs` table yet: the layout's DDL creates it with the column.
    if table && !has {
        connection.execute_batch("ALTER TABLE runs ADD COLUMN retains_until INTEGER;").map_err(unavailable)?;
    }
    Ok(())
}

/// The base tables; every statement is idempotent.
const DDL: &str = "
CREATE TABLE IF NOT EXISTS workflows (
    namespace     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    content_hash  TEXT    NOT NULL,
    document      TEXT    NOT NULL,
    registered_at INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id, content_hash)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    edges       TEXT    NOT NULL DEFAULT '',
    retains_until INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at, run_id);
CREATE INDEX IF NOT EXISTS workflows_by_seq ON workflows (namespace, workflow_id, seq);
CREATE TABLE IF NOT EXISTS idempotency (
    tenant         TEXT    NOT NULL,
    endpoint       TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    request_digest TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    lease_until    INTEGER,
    status         INTEGER,
    body           TEXT,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (tenant, endpoint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks (
    task_id      TEXT    PRIMARY KEY,
    run_id       TEXT    NOT NULL,
    effect       TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,
    leased_until INTEGER,
    deliveries   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_due ON tasks (due_at);
CREATE TABLE IF NOT EXISTS settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
";

/// Every statement of the current layout (the base tables, then the layout-3, layout-4,
/// layout-5, layout-6 and layout-8 additions).
pub(crate) fn ddl() -> String {
    format!("{DDL}{VOTES}{IDEMPOTENCY_BY_AGE}{RUN_RECORDS}{}{HOST_RECORDS}{RUN_BLOBS}", crate::pages::EVENT_PAGES)
}
