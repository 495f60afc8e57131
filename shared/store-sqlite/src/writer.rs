//! Group commit. Run creations, commits, task acknowledgements, run deletions and host record writes are
//! serialized by their callers (outside any lock) and queued to one writer thread, which takes
//! everything queued — up to [`MAX_GROUP`] writes — and applies it in one transaction (a write that loses its
//! version race or finds its idempotency key taken writes nothing; one that fails midway is
//! rolled back alone, see [`apply_transaction`]), then commits once: one fsync for the whole group, with
//! `synchronous=FULL` unchanged. While the writer waits on the disk, the next group queues.
//! A caller's future resolves once its group is durable (a group of task acknowledgements
//! alone is written without its own fsync, see [`apply_group`]).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rusqlite::{params, Connection};
use tokio::sync::oneshot;
use trellis_core::engine::Effect;
use trellis_core::interrupt::{counted_vote, Vote};
use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
use trellis_core::ports::IdempotencyRecord;
use trellis_core::{RunEvent, StoreError};

use crate::cache::HotRuns;
use crate::host_records::RecordWrite;
use crate::records::{RunRows, Written};
use crate::store::{find_record, to_json, unavailable};
use crate::usage::Counters;

/// Writes applied in one transaction at most.
pub(crate) const MAX_GROUP: usize = 256;

/// An event row and the vote it casts.
#[derive(Debug)]
pub(crate) struct EventRow {
    pub(crate) sequence: u64,
    pub(crate) event_type: String,
    pub(crate) node_id: Option<String>,
    pub(crate) payload: String,
    pub(crate) timestamp: u64,
    pub(crate) causation: Option<u64>,
    vote: Option<(String, Vote)>,
}

/// Serializes `events`.
pub(crate) fn event_rows(events: &[RunEvent]) -> Result<Vec<EventRow>, StoreError> {
    events
        .iter()
        .map(|event| {
            Ok(EventRow {
                sequence: event.sequence,
                event_type: event.event_type.clone(),
                node_id: event.node_id.clone(),
                payload: to_json(&event.payload)?,
                timestamp: event.timestamp,
                causation: event.causation,
                vote: counted_vote(event),
            })
        })
        .collect()
}

/// A task row: `(task id, effect document, due at)`.
pub(crate) type TaskRow = (String, String, u64);

/// Serializes `effects` of `run_id` as task rows.
pub(crate) fn task_rows(run_id: &str, effects: &[Effect]) -> Result<Vec<TaskRow>, StoreError> {
    effects.iter().map(|effect| Ok((effect.task_id(run_id), to_json(effect)?, effect.due_at()))).collect()
}

/// One queued write.
#[derive(Debug)]
pub(crate) enum Write {
    /// A new run (and the idempotency record answering its request).
    Create {
        run: RunRows,
        events: Vec<EventRow>,
        tasks: Vec<TaskRow>,
        idempotency: Option<(IdempotencyRecord, String)>,
    },
    /// A commit against `expected_version`.
    Commit { run: RunRows, expected_version: u64, events: Vec<EventRow>, tasks: Vec<TaskRow> },
    /// Finished tasks to delete.
    Ack(Vec<String>),
    /// A host record's conditional put or delete (see [`crate::host_records`]).
    Record(RecordWrite),
    /// A run and every row kept for it (see [`crate::removal`]).
    Delete(String),
    /// A run's blobs, by reference (see [`crate::blobs`]).
    Blobs { run_id: String, blobs: Vec<(String, Vec<u8>)> },
}

/// How a write ended.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Written.
    Done,
    /// Not written: the run's version moved (commit), or the idempotency key is claimed by
    /// another request (create).
    Conflict,
    /// Not written: the idempotency key already holds this finished answer.
    Existing(IdempotencyRecord),
    /// A host record written at this version.
    Version(u64),
    /// A host record delete: whether a live record was deleted.
    Deleted(bool),
    /// A run deleted: the bytes it stored.
    Freed(u64),
}

impl Answer {
    /// Whether the write was applied (its savepoint is kept).
    fn applied(&self) -> bool {
        matches!(self, Answer::Done | Answer::Version(_) | Answer::Deleted(_) | Answer::Freed(_))
    }
}

type Job = (Write, oneshot::Sender<Result<Answer, StoreError>>);

/// The handle to the writer thread; dropping it stops the thread (after the writes queued).
pub(crate) struct Writer {
    queue: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer over `connection`.
    pub(crate) fn start(connection: Arc<Mutex<Connection>>, counters: Arc<Counters>, hot: Arc<HotRuns>) -> Self {
        let (queue, jobs) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("trellis-sqlite-writer".into())
            .spawn(move || run(&jobs, &connection, &counters, &hot))
            .ok();
        Self { queue: Some(queue), thread }
    }

    /// Queues `write` and waits until its group is durable.
    pub(crate) async fn write(&self, write: Write) -> Result<Answer, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("the store's writer has stopped".to_owned());
        self.queue.as_ref().ok_or_else(gone)?.send((write, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(connection: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn run(jobs: &Receiver<Job>, connection: &Mutex<Connection>, counters: &Counters, hot: &HotRuns) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let connection = lock(connection);
        let answers = apply_group(&connection, counters, hot, group.iter().map(|(write, _)| write));
        drop(connection);
        for ((_, reply), answer) in group.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

/// Applies `writes` in one transaction; one answer per write. If the transaction cannot
/// commit, every write fails (nothing of the group is written).
fn apply_group<'a>(
    connection: &Connection,
    counters: &Counters,
    hot: &HotRuns,
    writes: impl Iterator<Item = &'a Write>,
) -> Vec<Result<Answer, StoreError>> {
    let writes: Vec<&Write> = writes.collect();
    // Acknowledgements alone are not worth an fsync: a lost one only redelivers a finished
    // task, which finds its work committed and is acknowledged again. The next durable
    // commit makes them durable too (the WAL is synced as a whole).
    let lazy = writes.iter().all(|write| matches!(write, Write::Ack(_)));
    if !lazy {
        return apply_transaction(connection, counters, hot, &writes);
    }
    match without_fsync(connection, |connection| Ok(apply_transaction(connection, counters, hot, &writes))) {
        Ok(answers) => answers,
        Err(error) => writes.iter().map(|_| Err(error.clone())).collect(),
    }
}

/// Runs `write` with `synchronous = NORMAL`: what it commits reaches the WAL (and so
/// survives the process being killed) but waits for the next durable commit's fsync (the WAL
/// is synced as a whole) to survive a power loss. Only for soft state whose loss in a power
/// failure costs a redelivery, never an event: acknowledgements and task claims.
///
/// `synchronous = FULL` is restored however `write` ends (a guard, also on a panic); if it
/// cannot be, the process aborts — nothing may be committed less durably than promised, and
/// a panic would only end the calling task while the writer thread went on.
pub(crate) fn without_fsync<T>(
    connection: &Connection,
    write: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    /// Restores `synchronous = FULL` when dropped.
    struct Restore<'a>(&'a Connection);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            // A pragma's setting takes effect when it is prepared, so it is not cached.
            if let Err(error) = self.0.execute_batch("PRAGMA synchronous = FULL") {
                eprintln!("trellis: cannot restore synchronous=FULL after a write without fsync ({error}); aborting");
                std::process::abort();
            }
        }
    }
    if connection.execute_batch("PRAGMA synchronous = NORMAL").is_err() {
        return Err(StoreError::Unavailable("cannot relax the sync mode".into()));
    }
    let _restore = Restore(connection);
    write(connection)
}

/// Applies `writes` in one transaction; one answer per write.
///
/// First without a savepoint per write: every write checks its run's version or its
/// idempotency key before it writes anything, so a conflict or an existing answer leaves
/// nothing to roll back, and a savepoint would only cost SQLite a copy of every page each
/// write touches (its statement journal). A write that *fails* midway may have written part
/// of itself: then the whole transaction is rolled back and the group applied again with a
/// savepoint per write, which rolls the failing write back alone — as if the fast attempt
/// had never been made.
fn apply_transaction(
    connection: &Connection,
    counters: &Counters,
    hot: &HotRuns,
    writes: &[&Write],
) -> Vec<Result<Answer, StoreError>> {
    for write in writes {
        match write {
            Write::Commit { run, .. } => hot.forget(run.run_id()),
            Write::Delete(run_id) => hot.forget(run_id),
            _ => {}
        }
    }
    match transaction(connection, counters, writes, false) {
        Some(answers) => answers,
        None => transaction(connection, counters, writes, true).unwrap_or_default(),
    }
}

/// One transaction over `writes`, each in its own savepoint when `savepoints`; without
/// savepoints, `None` (everything rolled back) as soon as a write fails.
fn transaction(
    connection: &Connection,
    counters: &Counters,
    writes: &[&Write],
    savepoints: bool,
) -> Option<Vec<Result<Answer, StoreError>>> {
    if let Err(error) = control(connection, "BEGIN IMMEDIATE") {
        return Some(writes.iter().map(|_| Err(unavailable_ref(&error))).collect());
    }
    let mut answers = Vec::with_capacity(writes.len());
    let mut written: Written = (0, 0);
    for write in writes {
        if connection.is_autocommit() {
            // SQLite rolled the whole transaction back (disk full, I/O error): nothing of the
            // group is written, and no later write may commit on its own.
            answers.push(Err(StoreError::Unavailable("the group's transaction was rolled back".into())));
            continue;
        }
        if !savepoints {
            let answer = apply(connection, write, &mut written);
            if answer.is_err() {
                if !connection.is_autocommit() {
                    let _ = control(connection, "ROLLBACK");
                }
                return None;
            }
            answers.push(answer);
            continue;
        }
        answers.push(savepoint(connection, |connection| apply(connection, write, &mut written)));
    }
    if connection.is_autocommit() {
        return Some(
            answers
                .into_iter()
                .map(|_| Err(StoreError::Unavailable("the group's transaction was rolled back".into())))
                .collect(),
        );
    }
    Some(match control(connection, "COMMIT") {
        Ok(()) => {
            counters.wrote(written.0, written.1);
            answers
        }
        Err(error) => {
            let _ = control(connection, "ROLLBACK");
            answers.iter().map(|_| Err(unavailable_ref(&error))).collect()
        }
    })
}

fn unavailable_ref(error: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

/// Runs `body` in a savepoint, rolled back unless it was applied ([`Answer::applied`]).
fn savepoint(
    connection: &Connection,
    body: impl FnOnce(&Connection) -> Result<Answer, StoreError>,
) -> Result<Answer, StoreError> {
    control(connection, "SAVEPOINT write").map_err(unavailable)?;
    let answer = body(connection);
    if !answer.as_ref().is_ok_and(Answer::applied) {
        control(connection, "ROLLBACK TO write").map_err(unavailable)?;
    }
    control(connection, "RELEASE write").map_err(unavailable)?;
    answer
}

/// Runs one transaction-control statement through the statement cache (every group runs
/// several; `execute_batch` would parse and plan each anew).
fn control(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(drop)
}

fn apply(connection: &Connection, write: &Write, written: &mut Written) -> Result<Answer, StoreError> {
    let mut mine: Written = (0, 0);
    match write {
        Write::Create { run, events, tasks, idempotency } => {
            if let Some((record, body)) = idempotency {
                if !record_answer(connection, record, body)? {
                    let existing = find_record(connection, &record.tenant, &record.endpoint, &record.key)?;
                    return Ok(existing.map_or(Answer::Conflict, Answer::Existing));
                }
            }
            add(&mut mine, run.insert(connection)?);
            add(&mut mine, insert_events(connection, run.run_id(), events)?);
            add(&mut mine, insert_tasks(connection, run.run_id(), tasks)?);
        }
        Write::Commit { run, expected_version, events, tasks } => {
            let Some(rows) = run.update(connection, *expected_version)? else { return Ok(Answer::Conflict) };
            add(&mut mine, rows);
            add(&mut mine, insert_events(connection, run.run_id(), events)?);
            add(&mut mine, insert_tasks(connection, run.run_id(), tasks)?);
        }
        Write::Ack(task_ids) => {
            let mut delete = connection.prepare_cached("DELETE FROM tasks WHERE task_id = ?1").map_err(unavailable)?;
            for task_id in task_ids {
                delete.execute([task_id]).map_err(unavailable)?;
            }
        }
        Write::Record(record) => {
            let (answer, rows) = crate::host_records::apply(connection, record)?;
            add(written, rows);
            return Ok(answer);
        }
        Write::Delete(run_id) => return crate::removal::delete(connection, run_id).map(Answer::Freed),
        Write::Blobs { run_id, blobs } => {
            crate::blobs::put_blobs(connection, run_id, blobs)?;
            let bytes: usize = blobs.iter().map(|(_, bytes)| bytes.len()).sum();
            add(&mut mine, (blobs.len() as u64, bytes));
        }
    }
    add(written, mine);
    Ok(Answer::Done)
}

fn add(total: &mut Written, more: Written) {
    total.0 += more.0;
    total.1 += more.1;
}

/// Completes the caller's pending claim, or records afresh; a finished record wins (one older
/// than the retention is absent: it is replaced). `false` when the key is taken.
fn record_answer(connection: &Connection, record: &IdempotencyRecord, body: &str) -> Result<bool, StoreError> {
    let inserted = connection
        .prepare_cached(
            "INSERT INTO idempotency (tenant, endpoint, key, request_digest, state, status, body, created_at)
             VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7)
             ON CONFLICT (tenant, endpoint, key) DO UPDATE SET
                 state = 'completed', request_digest = excluded.request_digest, status = excluded.status,
                 body = excluded.body, lease_until = NULL, created_at = excluded.created_at
             WHERE (idempotency.state = 'pending' AND idempotency.request_digest = excluded.request_digest)
                OR (idempotency.state = 'completed' AND idempotency.created_at <= ?8)",
        )
        .map_err(unavailable)?
        .execute(params![
            record.tenant,
            record.endpoint,
            record.key,
            record.request_digest,
            record.status,
            body,
            record.created_at,
            record.created_at.saturating_sub(IDEMPOTENCY_RETENTION_MS)
        ])
        .map_err(unavailable)?;
    Ok(inserted > 0)
}

/// Appends a commit's events (as pages, see [`crate::pages`]) and records the votes they cast.
fn insert_events(connection: &Connection, run_id: &str, events: &[EventRow]) -> Result<Written, StoreError> {
    let rows = crate::pages::insert(connection, run_id, events.iter().map(crate::pages::EventRef::from))?;
    let mut written: Written = (rows, events.iter().map(|event| event.payload.len()).sum());
    // Votes in event order: a later vote of the same voter in one commit replaces the earlier.
    let mut votes = events.iter().filter_map(|event| event.vote.as_ref()).peekable();
    if votes.peek().is_some() {
        let mut vote = connection
            .prepare_cached(
                "INSERT INTO votes (run_id, interrupt_id, voter, action, decided_by, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (run_id, interrupt_id, voter) DO UPDATE SET
                 action = excluded.action, decided_by = excluded.decided_by, at = excluded.at",
            )
            .map_err(unavailable)?;
        for (interrupt_id, cast) in votes {
            vote.execute(params![run_id, interrupt_id, cast.voter, cast.action, cast.decided_by, cast.at])
                .map_err(unavailable)?;
            written.0 += 1;
        }
    }
    Ok(written)
}

/// Enqueues task rows (re-enqueueing an id is a no-op).
pub(crate) fn insert_tasks(connection: &Connection, run_id: &str, tasks: &[TaskRow]) -> Result<Written, StoreError> {
    let mut insert = connection
        .prepare_cached("INSERT OR IGNORE INTO tasks (task_id, run_id, effect, due_at) VALUES (?1, ?2, ?3, ?4)")
        .map_err(unavailable)?;
    let mut written: Written = (0, 0);
    for (task_id, document, due_at) in tasks {
        written.1 += document.len();
        written.0 += insert.execute(params![task_id, run_id, document, due_at]).map_err(unavailable)? as u64;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use trellis_core::model::Workflow;
    use trellis_core::ports::RunStore;
    use trellis_core::run::Changes;
    use trellis_core::testing::pending_run;

    use super::*;
    use crate::SqliteStore;

    fn workflow() -> Workflow {
        Workflow::compile(json!({"id": "one", "name": "one", "nodes": [{"id": "a", "typeId": "core.noop"}]})).unwrap()
    }

    #[tokio::test]
    async fn a_group_commits_together_and_a_lost_race_is_rolled_back_alone() {
        let store = SqliteStore::open_in_memory().unwrap();
        let workflow = workflow();
        let mut first = pending_run(&workflow, "run-1", "t");
        store.create_run(&first, &[], &[], None).await.unwrap();
        first.version += 1;
        // A second commit of run-1 against version 0, which the first moved on.
        let mut stale = pending_run(&workflow, "run-1", "t");
        stale.version = 1;
        let second = pending_run(&workflow, "run-2", "t");
        let writes = [
            Write::Commit {
                run: RunRows::of(&first, &Changes::all()).unwrap(),
                expected_version: 0,
                events: vec![],
                tasks: vec![],
            },
            Write::Commit {
                run: RunRows::of(&stale, &Changes::all()).unwrap(),
                expected_version: 0,
                events: vec![],
                tasks: vec![],
            },
            Write::Create {
                run: RunRows::of(&second, &Changes::all()).unwrap(),
                events: vec![],
                tasks: task_rows("run-2", &[Effect::Deadline { due_at: 9 }]).unwrap(),
                idempotency: None,
            },
        ];
        let answers = {
            let guard = store.connection.lock().unwrap();
            apply_group(&guard, &Counters::default(), &HotRuns::default(), writes.iter())
        };
        let answers: Vec<String> = answers.into_iter().map(|answer| format!("{answer:?}")).collect();
        assert_eq!(answers, ["Ok(Done)", "Ok(Conflict)", "Ok(Done)"]);
        assert_eq!(store.load_run("run-1").await.unwrap().unwrap().version, 1);
        assert!(store.load_run("run-2").await.unwrap().is_some());
        let counts = store.table_counts().unwrap();
        assert!(counts.contains(&("tasks", 1)), "{counts:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writers_all_get_their_own_answer() {
        let store = Arc::new(SqliteStore::open_in_memory().unwrap());
        let workflow = Arc::new(workflow());
        let mut creates = tokio::task::JoinSet::new();
        for i in 0..64 {
            let (store, workflow) = (store.clone(), workflow.clone());
            creates.spawn(async move {
                let run = pending_run(&workflow, &format!("run-{i}"), "t");
                store.create_run(&run, &[], &[], None).await
            });
        }
        while let Some(created) = creates.join_next().await {
            assert!(matches!(created.unwrap(), Ok(trellis_core::ports::CreateResult::Created)));
        }
        assert!(store.table_counts().unwrap().contains(&("runs", 64)));
    }

    #[test]
    fn a_write_without_fsync_runs_at_normal_and_full_is_restored_however_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let connection = Connection::open(dir.path().join("sync.db")).unwrap();
        connection.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;").unwrap();
        let level = |connection: &Connection| -> i64 {
            connection.query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap()
        };
        let inside = without_fsync(&connection, |connection| Ok(level(connection))).unwrap();
        assert_eq!((inside, level(&connection)), (1, 2), "NORMAL inside, FULL after");
        let failed: Result<(), StoreError> =
            without_fsync(&connection, |_| Err(StoreError::Unavailable("the write failed".into())));
        assert!(failed.is_err());
        assert_eq!(level(&connection), 2, "FULL after a failed write");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _: Result<(), StoreError> = without_fsync(&connection, |_| panic!("the write panicked"));
        }));
        assert!(panicked.is_err());
        assert_eq!(level(&connection), 2, "FULL after a panicking write");
    }
}
