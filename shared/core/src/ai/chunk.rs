//! Streamed model output in the log. An executor reports tokens in batches (never a commit
//! per token); each batch is one `output.chunk` event whose `chunk` is a [`ChunkBatch`]:
//!
//! ```json
//! {"nodeId": "ask", "attempt": 0, "chunk": {"parts": ["Hel", "lo"], "isLast": false}}
//! ```
//!
//! The last batch of an attempt has `isLast: true` and `meta` (`finishReason`, `usage
//! {promptTokens, completionTokens, totalTokens}`, `model`, `provider`). The `messages`
//! stream mode projects every part as one `ai.message.chunk` frame ([`message_frames`]):
//! `{nodeId, runId, chunk, isLast}` plus `meta` on the attempt's final frame. Chunks of an
//! attempt that failed stay in the log with their `attempt`; a `messages` client sees that
//! attempt's frames end without `isLast` and the next attempt's frames start over.

use serde_json::{json, Value};

/// One batch of streamed parts of one attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkBatch {
    /// The parts (tokens, or runs of tokens), in order.
    pub parts: Vec<String>,
    /// Whether the attempt's stream ended with this batch.
    pub is_last: bool,
    /// On the last batch: `{finishReason, usage, model, provider}`.
    pub meta: Option<Value>,
}

impl ChunkBatch {
    /// The value reported as `Progress::Chunk { data }`.
    pub fn to_value(&self) -> Value {
        let mut value = json!({ "parts": self.parts, "isLast": self.is_last });
        if let Some(meta) = &self.meta {
            value["meta"] = meta.clone();
        }
        value
    }

    /// The batch an `output.chunk` payload's `chunk` holds, if it is one (another activity
    /// may stream other values).
    pub fn from_value(value: &Value) -> Option<Self> {
        let parts: Option<Vec<String>> =
            value.get("parts")?.as_array()?.iter().map(|part| part.as_str().map(str::to_owned)).collect();
        Some(Self {
            parts: parts?,
            is_last: value.get("isLast").and_then(Value::as_bool).unwrap_or(false),
            meta: value.get("meta").filter(|meta| meta.is_object()).cloned(),
        })
    }
}

/// The `ai.message.chunk` payloads (`outputChunk`) of one `output.chunk` event's payload,
/// in order; none for a payload that is not a [`ChunkBatch`] or an empty batch that is not
/// the last.
pub fn message_frames(run_id: &str, payload: &Value) -> Vec<Value> {
    let node_id = payload.get("nodeId").cloned().unwrap_or(Value::Null);
    let Some(batch) = payload.get("chunk").and_then(ChunkBatch::from_value) else { return Vec::new() };
    let count = batch.parts.len();
    let mut frames: Vec<Value> = batch
        .parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            json!({ "nodeId": node_id, "runId": run_id, "chunk": part, "isLast": batch.is_last && index + 1 == count })
        })
        .collect();
    if batch.is_last && frames.is_empty() {
        frames.push(json!({ "nodeId": node_id, "runId": run_id, "chunk": "", "isLast": true }));
    }
    if let (Some(meta), Some(last)) = (batch.meta.filter(|_| batch.is_last), frames.last_mut()) {
        last["meta"] = meta;
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_becomes_one_frame_per_part_with_meta_on_the_last() {
        let batch = ChunkBatch {
            parts: vec!["Hello".into(), " ".into(), "world".into(), "!".into()],
            is_last: true,
            meta: Some(json!({"finishReason": "stop"})),
        };
        let payload = json!({"nodeId": "ai", "attempt": 0, "chunk": batch.to_value()});
        let frames = message_frames("r1", &payload);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[0], json!({"nodeId": "ai", "runId": "r1", "chunk": "Hello", "isLast": false}));
        assert_eq!(frames[3]["isLast"], true);
        assert_eq!(frames[3]["meta"]["finishReason"], "stop");
        assert_eq!(ChunkBatch::from_value(&batch.to_value()), Some(batch));
    }

    #[test]
    fn other_chunks_project_nothing_and_an_empty_last_batch_still_closes() {
        assert!(message_frames("r1", &json!({"nodeId": "a", "chunk": "plain"})).is_empty());
        let closing = json!({"nodeId": "a", "chunk": {"parts": [], "isLast": true}});
        assert_eq!(
            message_frames("r1", &closing),
            [json!({"nodeId": "a", "runId": "r1", "chunk": "", "isLast": true})]
        );
    }
}
