//! The Server-Sent Events body of `GET /v1/runs/{runId}/events` (and `/runs/{runId}/events`
//! on v2): the backlog after the resume point, then live events as they are committed (woken
//! by the commit notifier, not by polling the store on a timer), a `:keepalive` comment on
//! quiet streams, and the server closes the stream right after the terminal event.
//!
//! Framing per mode:
//! - `updates` / `debug`: one `id: <sequence>` / `event: <type>` / `data: <RunEventDoc>` frame
//!   per admitted event;
//! - `values`: one `event: state.snapshot` frame whose data is the run snapshot (the document
//!   `GET /v1/runs/{runId}` answers), after each read that brought update-tier events, `id:`
//!   the last sequence read. The snapshot is read after the events, so it is never older than
//!   its `id`. A resumed stream (`Last-Event-ID`) starts with a snapshot. `bufferMs` does not
//!   apply (snapshots are never batched);
//! - `bufferMs` > 0 (`updates` / `debug`): admitted events are held and sent as one
//!   `event: batch` frame whose data is the array of their documents and whose `id:` is the
//!   highest sequence in it, `bufferMs` after the first event held; a terminal event, a
//!   `node.suspended` and the end of the stream flush at once;
//! - `messages` (alone or with `updates`/`debug`): each part of an `output.chunk` batch as an
//!   `event: ai.message.chunk` frame whose data is the `outputChunk` payload (`{nodeId, runId,
//!   chunk, isLast, meta?}`), never buffered; `id:` on the batch's last frame only. Alone,
//!   nothing else is framed and the stream closes after the terminal event.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use trellis_core::event::types;
use trellis_core::ports::StoredEvent;

use super::stream::{Base, Filter};
use crate::event_json::{event_doc, run_events, write_doc};
use crate::links::BasePath;
use crate::render::{wire_run_id, Wire};
use crate::AppState;

/// Events read from the store per round.
const PAGE: usize = 500;

fn frame(id: Option<u64>, event: &str, data: &[u8]) -> Vec<u8> {
    let id = id.map(|id| format!("id: {id}\n")).unwrap_or_default();
    let mut frame = Vec::with_capacity(id.len() + event.len() + data.len() + 16);
    frame.extend_from_slice(id.as_bytes());
    frame.extend_from_slice(b"event: ");
    frame.extend_from_slice(event.as_bytes());
    frame.extend_from_slice(b"\ndata: ");
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\n\n");
    frame
}

/// The stream's state between chunks.
pub(crate) struct Stream {
    pub(crate) state: AppState,
    pub(crate) wire: Wire,
    /// The prefix of the links in `values` snapshots.
    pub(crate) base: BasePath,
    pub(crate) tenant: String,
    pub(crate) run_id: String,
    pub(crate) filter: Filter,
    /// The last sequence read (`None`: from the start).
    pub(crate) cursor: Option<u64>,
    /// Batch window (`None`: unbuffered).
    pub(crate) buffer: Option<Duration>,
    pub(crate) keepalive: Duration,
    pub(crate) ends_at: Option<Instant>,
    /// `values` mode owes a baseline snapshot (the stream was resumed).
    pub(crate) baseline: bool,
    /// Held event documents (comma-separated), the highest sequence among them, and when
    /// they are due.
    pub(crate) held: Vec<u8>,
    pub(crate) held_last: u64,
    pub(crate) flush_at: Option<Instant>,
    /// The terminal event has been read: close once what is held is sent.
    pub(crate) done: bool,
    /// Nothing more will be sent.
    pub(crate) closed: bool,
}

impl Stream {
    /// The held events as one `batch` frame, if any are held.
    fn take_batch(&mut self) -> Option<Vec<u8>> {
        if self.held.is_empty() {
            return None;
        }
        let mut data = Vec::with_capacity(self.held.len() + 2);
        data.push(b'[');
        data.append(&mut self.held);
        data.push(b']');
        self.flush_at = None;
        Some(frame(Some(self.held_last), "batch", &data))
    }

    /// The run's snapshot frame, read now.
    async fn snapshot_frame(&self) -> Option<Vec<u8>> {
        let run = self.state.services.get_run_summary(&self.tenant, &self.run_id).await.ok()?;
        let doc = super::runs::run_document(self.wire, &self.state, &self.base, &run);
        Some(frame(self.cursor, "state.snapshot", doc.to_string().as_bytes()))
    }

    /// The next chunk of bytes: frames, a keep-alive, or `None` to close.
    pub(crate) async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.closed {
            return None;
        }
        let notifier = self.state.services.notifier.clone();
        let quiet_since = Instant::now();
        loop {
            if self.done || self.ends_at.is_some_and(|end| Instant::now() >= end) {
                self.closed = true;
                return self.take_batch().map(Bytes::from);
            }
            let seen = notifier.run_generation(&self.run_id);
            let read = run_events(&self.state, &self.tenant, &self.run_id, self.cursor, PAGE).await;
            let Ok((run, events)) = read else {
                self.closed = true;
                return self.take_batch().map(Bytes::from);
            };
            let mut chunk = self.admit(&events);
            let admitted = chunk.admitted;
            if let Some(last) = events.last() {
                self.cursor = Some(last.sequence);
            }
            if self.filter.base == Base::Values && (admitted || self.baseline) {
                self.baseline = false;
                match self.snapshot_frame().await {
                    Some(snapshot) => chunk.bytes.extend(snapshot),
                    None => self.closed = true,
                }
            }
            if chunk.flush || self.flush_at.is_some_and(|at| Instant::now() >= at) {
                if let Some(batch) = self.take_batch() {
                    chunk.bytes.extend(batch);
                }
            }
            if !chunk.bytes.is_empty() {
                return Some(Bytes::from(chunk.bytes));
            }
            if self.closed {
                return None;
            }
            if self.done || !events.is_empty() {
                continue;
            }
            if run.status.is_terminal() {
                // Resumed past the terminal event: nothing more will come.
                self.done = true;
                continue;
            }
            let elapsed = quiet_since.elapsed();
            if elapsed >= self.keepalive {
                return Some(Bytes::from_static(b":keepalive\n\n"));
            }
            let now = Instant::now();
            let mut wait = self.keepalive - elapsed;
            for deadline in [self.ends_at, self.flush_at].into_iter().flatten() {
                wait = wait.min(deadline.saturating_duration_since(now));
            }
            if !wait.is_zero() {
                notifier.wait_run(&self.run_id, seen, wait).await;
            }
        }
    }

    /// Frames (or holds) the admitted events of one read.
    fn admit(&mut self, events: &[StoredEvent]) -> Admitted {
        let mut out = Admitted::default();
        let id = wire_run_id(self.wire, &self.tenant, &self.run_id);
        for event in events {
            if self.filter.projects(&event.event_type) {
                // Held events come first: a message frame's `id` must never pass a held one.
                if let Some(batch) = self.take_batch() {
                    out.bytes.extend(batch);
                }
                out.bytes.extend(message_frames(&id, event));
            }
            if self.filter.admits(&event.event_type) {
                out.admitted = true;
                match (self.filter.base, self.buffer) {
                    (Base::Values, _) => {}
                    (_, Some(window)) => {
                        let mark = self.held.len();
                        if mark > 0 {
                            self.held.push(b',');
                        }
                        if write_doc(&mut self.held, self.wire, &id, event).is_err() {
                            self.held.truncate(mark);
                        }
                        self.held_last = event.sequence;
                        self.flush_at.get_or_insert_with(|| Instant::now() + window);
                        out.flush |= event.event_type == types::NODE_SUSPENDED;
                    }
                    (_, None) => {
                        let data = event_doc(self.wire, &id, event);
                        out.bytes.extend(frame(Some(event.sequence), &event.event_type, &data));
                    }
                }
            }
            if types::is_terminal(&event.event_type) {
                self.done = true;
                out.flush = true;
            }
        }
        out
    }
}

/// The `event: ai.message.chunk` frames of one `output.chunk` event (none when its chunk is
/// not a model call's batch). Only the event's last frame carries `id:`, so a client that
/// resumes from it has seen every part of the batch.
fn message_frames(run_id: &str, event: &StoredEvent) -> Vec<u8> {
    let Ok(payload) = serde_json::from_str::<serde_json::Value>(&event.payload_json) else { return Vec::new() };
    let frames = trellis_core::ai::chunk::message_frames(run_id, &payload);
    let count = frames.len();
    let mut bytes = Vec::new();
    for (index, payload) in frames.into_iter().enumerate() {
        let id = (index + 1 == count).then_some(event.sequence);
        bytes.extend(frame(id, "ai.message.chunk", payload.to_string().as_bytes()));
    }
    bytes
}

/// What one read produced.
#[derive(Default)]
struct Admitted {
    bytes: Vec<u8>,
    admitted: bool,
    flush: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_batch_becomes_one_message_frame_per_part_with_the_id_on_the_last() {
        let payload = serde_json::json!({"nodeId": "ai", "attempt": 0, "chunk": {"parts": ["Hel", "lo"], "isLast": true, "meta": {"finishReason": "stop"}}});
        let event = StoredEvent {
            sequence: 7,
            event_type: types::OUTPUT_CHUNK.to_owned(),
            node_id: Some("ai".into()),
            payload_json: payload.to_string(),
            timestamp: 0,
            causation: None,
        };
        let text = String::from_utf8(message_frames("r1", &event)).unwrap();
        let frames: Vec<&str> = text.split("\n\n").filter(|frame| !frame.is_empty()).collect();
        assert_eq!(frames.len(), 2);
        assert!(frames[0].starts_with("event: ai.message.chunk\ndata: {"), "{}", frames[0]);
        assert!(frames[1].starts_with("id: 7\nevent: ai.message.chunk\ndata: "), "{}", frames[1]);
        let last: serde_json::Value = serde_json::from_str(frames[1].split_once("data: ").unwrap().1).unwrap();
        assert_eq!(last["chunk"], "lo");
        assert_eq!((last["isLast"].as_bool(), last["meta"]["finishReason"].as_str()), (Some(true), Some("stop")));
        assert_eq!(last["runId"], "r1");
    }
}
