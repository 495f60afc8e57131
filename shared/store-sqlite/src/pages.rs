//! How a run's events are stored (layout 5): the events one commit appends are written as
//! one `event_pages` row — or several, of at most [`PAGE_EVENTS`] events or about
//! [`PAGE_BYTES`] bytes each — keyed by the run and the page's first sequence, its body the
//! events one after the other in a small binary encoding ([`encode`]).
//!
//! Why pages and not a row per event: a chained commit of a 50-node run appends ~100 events,
//! and an event row is a few hundred bytes of a `WITHOUT ROWID` B-tree, so every ~10 rows
//! split a page (SQLite rebalances three siblings each time) and each row paid the binding,
//! cursor and record work of its own insert — together about a fifth of the host's
//! instructions per step. A page is one insert, its bytes mostly overflow pages written
//! whole. Reading a run's events reads the page holding the first wanted sequence and the
//! ones after it; pages of one run never overlap, because a run's commits are serialized and
//! each appends the sequences after the last.
//!
//! The body is a sequence of events, each: `sequence` (u64), `timestamp` (u64), a flags
//! byte (bit 0: a causation follows, bit 1: a node id follows), the causation (u64, if
//! flagged), then the type, the node id (if flagged) and the payload JSON text, each a u32
//! length and its UTF-8 bytes; integers little-endian. A body that does not decode is
//! reported as corrupt, never skipped.

use std::sync::LazyLock;

use rusqlite::{params, Connection};
use trellis_core::ports::StoredEvent;
use trellis_core::StoreError;

use crate::batch::Batched;
use crate::store::unavailable;
use crate::writer::EventRow;

/// The most events one page holds.
pub(crate) const PAGE_EVENTS: usize = 64;
/// A page is closed once its body passes this many bytes.
pub(crate) const PAGE_BYTES: usize = 16 * 1024;

/// The `event_pages` table (layout 5).
pub(crate) const EVENT_PAGES: &str = "
CREATE TABLE IF NOT EXISTS event_pages (
    run_id         TEXT    NOT NULL,
    first_sequence INTEGER NOT NULL,
    last_sequence  INTEGER NOT NULL,
    body           BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_sequence)
) WITHOUT ROWID;
";

const HAS_CAUSATION: u8 = 1;
const HAS_NODE: u8 = 2;

/// One event as a page holds it (borrowed from a row to write, or from a legacy row).
pub(crate) struct EventRef<'a> {
    pub(crate) sequence: u64,
    pub(crate) event_type: &'a str,
    pub(crate) node_id: Option<&'a str>,
    pub(crate) payload: &'a str,
    pub(crate) timestamp: u64,
    pub(crate) causation: Option<u64>,
}

impl<'a> From<&'a EventRow> for EventRef<'a> {
    fn from(row: &'a EventRow) -> Self {
        Self {
            sequence: row.sequence,
            event_type: &row.event_type,
            node_id: row.node_id.as_deref(),
            payload: &row.payload,
            timestamp: row.timestamp,
            causation: row.causation,
        }
    }
}

fn put_text(body: &mut Vec<u8>, text: &str) {
    body.extend_from_slice(&(text.len() as u32).to_le_bytes());
    body.extend_from_slice(text.as_bytes());
}

/// Appends `event` to a page body.
pub(crate) fn encode(body: &mut Vec<u8>, event: &EventRef<'_>) {
    body.extend_from_slice(&event.sequence.to_le_bytes());
    body.extend_from_slice(&event.timestamp.to_le_bytes());
    let flags =
        if event.causation.is_some() { HAS_CAUSATION } else { 0 } | if event.node_id.is_some() { HAS_NODE } else { 0 };
    body.push(flags);
    if let Some(causation) = event.causation {
        body.extend_from_slice(&causation.to_le_bytes());
    }
    put_text(body, event.event_type);
    if let Some(node_id) = event.node_id {
        put_text(body, node_id);
    }
    put_text(body, event.payload);
}

/// Reads a page body front to back.
struct Decoder<'a> {
    body: &'a [u8],
}

fn truncated() -> StoreError {
    StoreError::Corrupt("an event page ends inside an event".into())
}

impl<'a> Decoder<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], StoreError> {
        if self.body.len() < count {
            return Err(truncated());
        }
        let (head, rest) = self.body.split_at(count);
        self.body = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| truncated())?))
    }

    fn text(&mut self) -> Result<&'a [u8], StoreError> {
        let bytes = self.take(4)?;
        let length = u32::from_le_bytes(bytes.try_into().map_err(|_| truncated())?) as usize;
        self.take(length)
    }

    fn string(&mut self) -> Result<String, StoreError> {
        let bytes = self.text()?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| StoreError::Corrupt("an event page holds text that is not UTF-8".into()))
    }

    /// The next event (`None` at the end of the body). An event at or before `skip_up_to` is
    /// stepped over without reading its texts, and comes back as `Some(None)`.
    fn next(&mut self, skip_up_to: Option<u64>) -> Result<Option<Option<StoredEvent>>, StoreError> {
        if self.body.is_empty() {
            return Ok(None);
        }
        let sequence = self.u64()?;
        let timestamp = self.u64()?;
        let flags = self.take(1)?[0];
        let causation = if flags & HAS_CAUSATION != 0 { Some(self.u64()?) } else { None };
        if skip_up_to.is_some_and(|last| sequence <= last) {
            self.text()?;
            if flags & HAS_NODE != 0 {
                self.text()?;
            }
            self.text()?;
            return Ok(Some(None));
        }
        let event_type = self.string()?;
        let node_id = if flags & HAS_NODE != 0 { Some(self.string()?) } else { None };
        let payload_json = self.string()?;
        Ok(Some(Some(StoredEvent { sequence, event_type, node_id, payload_json, timestamp, causation })))
    }
}

/// Appends the events of `body` with `sequence > after` to `out` until it holds `limit`.
pub(crate) fn decode_into(
    body: &[u8],
    after: Option<u64>,
    limit: usize,
    out: &mut Vec<StoredEvent>,
) -> Result<(), StoreError> {
    let mut decoder = Decoder { body };
    while out.len() < limit {
        match decoder.next(after)? {
            None => break,
            Some(None) => {}
            Some(Some(event)) => out.push(event),
        }
    }
    Ok(())
}

/// Writes `events` (in sequence order) of `run_id` as pages; the rows written.
pub(crate) fn insert<'a>(
    connection: &Connection,
    run_id: &str,
    events: impl IntoIterator<Item = EventRef<'a>>,
) -> Result<u64, StoreError> {
    static PAGE: LazyLock<Batched> = LazyLock::new(|| {
        Batched::new("INSERT INTO event_pages (run_id, first_sequence, last_sequence, body) VALUES", 4, "")
    });
    let mut pages: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    let mut open: Option<(u64, u64, Vec<u8>, usize)> = None;
    for event in events {
        let (_, last, body, count) = open.get_or_insert_with(|| (event.sequence, event.sequence, Vec::new(), 0));
        encode(body, &event);
        *last = event.sequence;
        *count += 1;
        if *count >= PAGE_EVENTS || body.len() >= PAGE_BYTES {
            let (first, last, body, _) = open.take().expect("a page is open");
            pages.push((first, last, body));
        }
    }
    if let Some((first, last, body, _)) = open {
        pages.push((first, last, body));
    }
    let rows = PAGE.execute(connection, &pages, |statement, first, (first_sequence, last_sequence, body)| {
        statement.raw_bind_parameter(first, run_id)?;
        statement.raw_bind_parameter(first + 1, first_sequence)?;
        statement.raw_bind_parameter(first + 2, last_sequence)?;
        statement.raw_bind_parameter(first + 3, body.as_slice())
    })?;
    Ok(rows as u64)
}

/// The events of `run_id` with `sequence > after` (all when `None`), in order, at most
/// `limit`; also the body bytes read.
pub(crate) fn read(
    connection: &Connection,
    run_id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<(Vec<StoredEvent>, usize), StoreError> {
    // The page holding the first wanted sequence starts at or before it; later pages follow.
    let mut query = connection
        .prepare_cached(
            "SELECT body FROM event_pages
             WHERE run_id = ?1 AND first_sequence >= coalesce(
                 (SELECT max(first_sequence) FROM event_pages WHERE run_id = ?1 AND first_sequence <= ?2), 0)
             ORDER BY first_sequence",
        )
        .map_err(unavailable)?;
    let first_wanted = after.map_or(0, |sequence| sequence.saturating_add(1)) as i64;
    let mut rows = query.query(params![run_id, first_wanted]).map_err(unavailable)?;
    let mut events = Vec::new();
    let mut bytes = 0;
    while events.len() < limit {
        let Some(row) = rows.next().map_err(unavailable)? else { break };
        let body =
            row.get_ref(0).map_err(unavailable)?.as_blob().map_err(|error| StoreError::Corrupt(error.to_string()))?;
        bytes += body.len();
        decode_into(body, after, limit, &mut events)?;
    }
    Ok((events, bytes))
}

/// Layout 4 → 5: the `events` rows become pages (one run's events at a time, in sequence
/// order), and the `events` table goes. (A database without the table has nothing to move.)
pub(crate) fn convert_event_rows(connection: &Connection) -> Result<(), StoreError> {
    let legacy: i64 = connection
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'", [], |row| row.get(0))
        .map_err(unavailable)?;
    if legacy == 0 {
        return Ok(());
    }
    let mut query = connection
        .prepare("SELECT run_id, sequence, type, node_id, payload, timestamp, causation FROM events ORDER BY run_id, sequence")
        .map_err(unavailable)?;
    let mut rows = query.query([]).map_err(unavailable)?;
    type Legacy = (u64, String, Option<String>, String, u64, Option<u64>);
    let mut run: Option<(String, Vec<Legacy>)> = None;
    let flush = |run_id: &str, events: &[Legacy]| -> Result<(), StoreError> {
        let refs = events.iter().map(|(sequence, event_type, node_id, payload, timestamp, causation)| EventRef {
            sequence: *sequence,
            event_type,
            node_id: node_id.as_deref(),
            payload,
            timestamp: *timestamp,
            causation: *causation,
        });
        insert(connection, run_id, refs).map(drop)
    };
    while let Some(row) = rows.next().map_err(unavailable)? {
        let run_id: String = row.get(0).map_err(unavailable)?;
        let event: Legacy = (
            row.get(1).map_err(unavailable)?,
            row.get(2).map_err(unavailable)?,
            row.get(3).map_err(unavailable)?,
            row.get(4).map_err(unavailable)?,
            row.get(5).map_err(unavailable)?,
            row.get(6).map_err(unavailable)?,
        );
        match &mut run {
            Some((current, events)) if *current == run_id => events.push(event),
            _ => {
                if let Some((previous, events)) = run.take() {
                    flush(&previous, &events)?;
                }
                run = Some((run_id, vec![event]));
            }
        }
    }
    if let Some((previous, events)) = run.take() {
        flush(&previous, &events)?;
    }
    drop(rows);
    drop(query);
    connection.execute_batch("DROP TABLE events;").map_err(unavailable)
}

/// How many events the database holds.
pub(crate) fn count(connection: &Connection) -> Result<u64, StoreError> {
    connection
        .query_row("SELECT coalesce(sum(last_sequence - first_sequence + 1), 0) FROM event_pages", [], |row| row.get(0))
        .map_err(unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64, node: Option<&'static str>, causation: Option<u64>) -> EventRef<'static> {
        EventRef {
            sequence,
            event_type: "node.completed",
            node_id: node,
            payload: "{\"nodeId\":\"ä\",\"x\":1}",
            timestamp: 1_700_000_000_000 + sequence,
            causation,
        }
    }

    fn connection() -> Connection {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(EVENT_PAGES).unwrap();
        connection
    }

    #[test]
    fn a_body_decodes_to_the_events_encoded_and_a_cut_body_is_corrupt() {
        let mut body = Vec::new();
        for (sequence, node, causation) in [(0, None, None), (1, Some("n"), Some(0)), (2, Some(""), None)] {
            encode(&mut body, &event(sequence, node, causation));
        }
        let mut out = Vec::new();
        decode_into(&body, None, 10, &mut out).unwrap();
        let seen: Vec<_> = out.iter().map(|e| (e.sequence, e.node_id.as_deref(), e.causation)).collect();
        assert_eq!(seen, vec![(0, None, None), (1, Some("n"), Some(0)), (2, Some(""), None)]);
        assert_eq!(out[1].payload_json, "{\"nodeId\":\"ä\",\"x\":1}");
        assert_eq!(out[1].event_type, "node.completed");
        assert_eq!(out[2].timestamp, 1_700_000_000_002);
        let mut later = Vec::new();
        decode_into(&body, Some(0), 1, &mut later).unwrap();
        assert_eq!(later.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![1]);
        for cut in [1, 8, 17, body.len() - 1] {
            let mut out = Vec::new();
            let error = decode_into(&body[..cut], None, 10, &mut out).unwrap_err();
            assert!(matches!(error, StoreError::Corrupt(_)), "cut at {cut}: {error:?}");
        }
    }

    #[test]
    fn a_long_commit_is_cut_into_pages_and_any_range_reads_back_in_order() {
        let connection = connection();
        let total = 3 * PAGE_EVENTS as u64 + 5;
        let rows = insert(&connection, "run-a", (0..total).map(|s| event(s, Some("n"), None))).unwrap();
        assert_eq!(rows, 4);
        // Another run's pages in between change nothing.
        insert(&connection, "run-b", (0..3).map(|s| event(s, None, None))).unwrap();
        insert(&connection, "run-a", (total..total + 2).map(|s| event(s, None, Some(s - 1)))).unwrap();
        for (after, limit) in [(None, 1000), (Some(0), 10), (Some(63), 3), (Some(64), 200), (Some(total), 5)] {
            let (events, _) = read(&connection, "run-a", after, limit).unwrap();
            let first = after.map_or(0, |a| a + 1);
            let expected: Vec<u64> = (first..total + 2).take(limit).collect();
            assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), expected, "after {after:?}");
        }
        assert!(read(&connection, "run-a", Some(total + 1), 10).unwrap().0.is_empty());
        assert!(read(&connection, "nobody", None, 10).unwrap().0.is_empty());
        assert_eq!(count(&connection).unwrap(), total + 2 + 3);
    }

    #[test]
    fn a_page_is_closed_at_its_byte_budget() {
        let connection = connection();
        let big = "x".repeat(PAGE_BYTES / 2);
        let events = (0..4u64).map(|sequence| EventRef {
            sequence,
            event_type: "t",
            node_id: None,
            payload: &big,
            timestamp: 0,
            causation: None,
        });
        assert_eq!(insert(&connection, "run", events).unwrap(), 2);
        let (events, bytes) = read(&connection, "run", Some(1), 10).unwrap();
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![2, 3]);
        assert!(bytes >= PAGE_BYTES, "only the page holding sequence 2 is read");
    }
}
