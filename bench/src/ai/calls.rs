//! The model-call side of `trellis-bench-ai`: the providers file naming the in-process fake,
//! the `core.ai.callPrompt` workflows, and the count of a finished run's `output.chunk`
//! events.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};
use crate::follow::json_of;
use crate::host::KEY;
use crate::load::chain;

/// The provider id the workflows call.
pub(crate) const PROVIDER: &str = "fake";
/// The one model the provider lists.
pub(crate) const MODEL: &str = "fake-model";

/// Writes the `--ai-providers` document: one OpenAI-compatible provider at `base_url`, the
/// default, no key (the fake does not ask for one unless told to).
pub(crate) fn write_providers(path: &Path, base_url: &str) -> Fallible<()> {
    let providers =
        json!([{"id": PROVIDER, "kind": "openai", "baseUrl": base_url, "models": [MODEL], "default": true}]);
    std::fs::write(path, providers.to_string())
        .map_err(|error| BenchError::new("io_failed", format!("write {}: {error}", path.display())))
}

/// `length` `core.ai.callPrompt` nodes in a row, each one model call rendering a prompt
/// from its own literal input; `stream` asks the provider for server-sent events (the
/// tokens are then committed as `output.chunk` batches).
pub(crate) fn ai_chain(id: &str, length: usize, stream: bool) -> Value {
    chain(id, length, |i| {
        json!({
            "id": format!("n{i}"),
            "typeId": "core.ai.callPrompt",
            "inputs": {"x": format!("node {i}")},
            "config": {"provider": PROVIDER, "model": MODEL, "prompt": "hello {{inputs.x}}", "stream": stream, "timeoutMs": 60_000},
        })
    })
}

/// The `output.chunk` events of the finished run `run_id`, read page by page from the start.
pub(crate) async fn chunk_events(http: &reqwest::Client, base: &str, run_id: &str) -> Fallible<usize> {
    let mut cursor = -1i64;
    let mut chunks = 0;
    loop {
        let url = format!("{base}/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=0");
        let page = json_of(http.get(url), KEY, "poll").await?;
        let events = page["events"].as_array().map(Vec::as_slice).unwrap_or_default();
        chunks += events.iter().filter(|event| event["type"] == "output.chunk").count();
        let next = page["lastEventSeq"].as_i64().unwrap_or(cursor);
        if page["isComplete"] == true || next == cursor {
            return Ok(chunks);
        }
        cursor = next;
    }
}
