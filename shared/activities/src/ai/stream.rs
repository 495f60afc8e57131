//! Reading a provider's server-sent events and batching the tokens they carry.
//!
//! [`SseParser`] is a small line parser of the WHATWG event-stream format (no crate: the
//! candidates bring a `futures` stream stack for thirty lines of logic): lines end with
//! `\n`, `\r\n` or `\r` (also when a chunk boundary splits `\r\n`), `:` starts a comment,
//! `data` lines of one event are joined with `\n`, a blank line dispatches, `id` sets the
//! last event id (ignored when it contains NUL; it persists across events until another `id`
//! line, an empty one clearing it), `retry` is ignored, bytes are decoded as UTF-8 per
//! complete line. The CLI's event stream reader uses the same parser (and the id for
//! `Last-Event-ID` resumption).
//!
//! [`Batcher`] groups tokens into [`ChunkBatch`]es: a batch is flushed when 250 ms passed
//! since it began or 4 KiB are buffered — never one report per token. A flush keeps the
//! latest token back, so the final batch (`isLast` with `meta`) always carries at least one
//! part when any token came.

use std::time::{Duration, Instant};

use trellis_core::ai::chunk::ChunkBatch;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (`None` = the default `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id at dispatch (the stream's latest `id:`, which persists across events).
    pub id: Option<String>,
}

/// The incremental parser.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    skip_lf: bool,
    event: Option<String>,
    data: Option<String>,
    last_id: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.skip_lf {
                self.skip_lf = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.skip_lf = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&String::from_utf8_lossy(&line)) {
                        events.push(event);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// The end of the stream: a pending event without its blank line is dispatched too
    /// (providers end with one; a cut stream may not).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.line_done(&String::from_utf8_lossy(&line)) {
                return Some(event);
            }
        }
        self.line_done("")
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            let id = self.last_id.clone();
            return self.data.take().map(|data| SseEvent { event, data, id });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => {
                self.last_id = (!value.is_empty()).then(|| value.to_owned());
            }
            _ => {}
        }
        None
    }
}

/// Flush a batch this long after it began.
pub const FLUSH_AFTER: Duration = Duration::from_millis(250);
/// Flush a batch holding this many bytes.
pub const FLUSH_BYTES: usize = 4 * 1024;

/// Groups tokens into batches (see the module docs). Pure: the caller passes the clock.
#[derive(Debug, Default)]
pub struct Batcher {
    parts: Vec<String>,
    bytes: usize,
    began: Option<Instant>,
    /// Every part pushed, in order (the answer's text is their concatenation).
    text: String,
    /// Parts pushed in all.
    count: usize,
}

impl Batcher {
    /// An empty batcher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token (empty ones are dropped); returns a batch to report when one is due.
    pub fn push(&mut self, token: &str, now: Instant) -> Option<ChunkBatch> {
        if token.is_empty() {
            return self.poll(now);
        }
        self.began.get_or_insert(now);
        self.parts.push(token.to_owned());
        self.bytes += token.len();
        self.text.push_str(token);
        self.count += 1;
        self.poll(now)
    }

    /// The batch due at `now`, if any (all parts but the latest).
    pub fn poll(&mut self, now: Instant) -> Option<ChunkBatch> {
        let began = self.began?;
        let due = self.bytes >= FLUSH_BYTES || now.saturating_duration_since(began) >= FLUSH_AFTER;
        if !due || self.parts.len() < 2 {
            return None;
        }
        let kept = self.parts.pop().unwrap_or_default();
        let parts = std::mem::replace(&mut self.parts, vec![kept]);
        self.bytes = self.parts[0].len();
        self.began = Some(now);
        Some(ChunkBatch { parts, is_last: false, meta: None })
    }

    /// When the pending batch will be due (`None` when nothing is pending).
    pub fn deadline(&self) -> Option<Instant> {
        self.began.filter(|_| self.parts.len() >= 2).map(|began| began + FLUSH_AFTER)
    }

    /// The final batch: what is left, `isLast`, with `meta`.
    pub fn finish(&mut self, meta: serde_json::Value) -> ChunkBatch {
        self.began = None;
        self.bytes = 0;
        ChunkBatch { parts: std::mem::take(&mut self.parts), is_last: true, meta: Some(meta) }
    }

    /// The text streamed so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Tokens pushed so far.
    pub fn count(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_split_across_chunks_and_line_endings_parse() {
        let mut parser = SseParser::default();
        let mut events = parser.push(b": comment\r\nevent: delta\r");
        events.extend(parser.push(b"\ndata: {\"a\"\r\ndata:1}\r\n\r"));
        events.extend(parser.push(b"\ndata: [DONE]\n\nid: 3\nretry: 5\n\n"));
        events.extend(parser.push("data: caf\u{e9}".as_bytes()));
        events.extend(parser.finish());
        assert_eq!(
            events,
            [
                SseEvent { event: Some("delta".into()), data: "{\"a\"\n1}".into(), id: None },
                SseEvent { event: None, data: "[DONE]".into(), id: None },
                SseEvent { event: None, data: "caf\u{e9}".into(), id: Some("3".into()) },
            ]
        );
    }

    #[test]
    fn a_multibyte_character_split_between_chunks_survives() {
        let bytes = "data: \u{1f600}\n\n".as_bytes();
        let mut parser = SseParser::default();
        let mut events = parser.push(&bytes[..8]);
        events.extend(parser.push(&bytes[8..]));
        assert_eq!(events, [SseEvent { event: None, data: "\u{1f600}".into(), id: None }]);
    }

    #[test]
    fn the_last_event_id_persists_and_an_id_with_nul_is_ignored() {
        let mut parser = SseParser::default();
        let events = parser.push(b"id: 7\ndata: a\n\ndata: b\n\nid: 8\0x\ndata: c\n\nid\ndata: d\n\n");
        let ids: Vec<Option<&str>> = events.iter().map(|event| event.id.as_deref()).collect();
        assert_eq!(ids, [Some("7"), Some("7"), Some("7"), None]);
    }

    #[test]
    fn a_fast_stream_is_one_final_batch() {
        let now = Instant::now();
        let mut batcher = Batcher::new();
        for token in ["Hello", " ", "world", "!"] {
            assert_eq!(batcher.push(token, now), None);
        }
        let last = batcher.finish(json!({"finishReason": "stop"}));
        assert_eq!((last.parts.len(), last.is_last), (4, true));
        assert_eq!(batcher.text(), "Hello world!");
    }

    #[test]
    fn batches_flush_by_time_and_by_size_keeping_the_latest_token() {
        let start = Instant::now();
        let mut batcher = Batcher::new();
        let mut reports = Vec::new();
        for index in 0..100u64 {
            // One token every 10 ms: a flush about every 250 ms, never per token.
            if let Some(batch) = batcher.push("tok ", start + Duration::from_millis(index * 10)) {
                reports.push(batch);
            }
        }
        reports.push(batcher.finish(json!({})));
        assert!(reports.len() >= 4 && reports.len() <= 6, "{}", reports.len());
        assert_eq!(reports.iter().map(|batch| batch.parts.len()).sum::<usize>(), 100);
        assert!(!reports.last().unwrap().parts.is_empty());

        let mut batcher = Batcher::new();
        let big = "x".repeat(3000);
        assert_eq!(batcher.push(&big, start), None);
        let flushed = batcher.push(&big, start).expect("4 KiB buffered");
        assert_eq!(flushed.parts.len(), 1);
        assert_eq!(batcher.finish(json!({})).parts.len(), 1);
        assert_eq!(batcher.deadline(), None);
    }
}
