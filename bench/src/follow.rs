//! One run driven the way a client drives it: create it, then long-poll its events until the
//! terminal page (or, for a run meant to park, until it asks for an interrupt), resolving its
//! interrupt when one is asked for. Shared by the benchmark binaries.

use std::time::Instant;

use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};

/// How one run went.
pub(crate) struct Followed {
    /// Create request sent.
    pub(crate) sent: Instant,
    /// Create answered (read by `trellis-bench-http` only).
    #[allow(dead_code)]
    pub(crate) created: Instant,
    /// Terminal page read.
    pub(crate) terminal: Instant,
    /// `runStatus` of the terminal page.
    pub(crate) status: String,
    /// The run's id.
    #[allow(dead_code)]
    pub(crate) run_id: String,
}

/// Sends a request with `key` and reads its JSON answer.
pub(crate) async fn json_of(request: reqwest::RequestBuilder, key: &str, what: &str) -> Fallible<Value> {
    let answer = request.bearer_auth(key).send().await.map_err(|e| BenchError::http(what, e))?;
    let status = answer.status();
    let body: Value = answer.json().await.map_err(|e| BenchError::http(what, e))?;
    if !status.is_success() {
        return Err(BenchError::new("unexpected_answer", format!("{what}: {status} {body}")));
    }
    Ok(body)
}

/// Creates a run of `workflow`; its id.
pub(crate) async fn create_run(http: &reqwest::Client, base: &str, key: &str, workflow: &str) -> Fallible<String> {
    let created =
        json_of(http.post(format!("{base}/v1/runs")).json(&json!({"workflowId": workflow})), key, "create").await?;
    created["runId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| BenchError::new("unexpected_answer", format!("no runId in {created}")))
}

/// One long-poll page of `run_id`'s events after `cursor`.
async fn poll(http: &reqwest::Client, base: &str, key: &str, run_id: &str, cursor: i64) -> Fallible<Value> {
    let url = format!("{base}/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=25");
    json_of(http.get(url), key, "poll").await
}

fn asks_interrupt(page: &Value) -> bool {
    page["events"].as_array().is_some_and(|events| events.iter().any(|e| e["type"] == "interrupt.requested"))
}

/// Creates a run of `workflow` with `key` and follows it to its end; with `resolve`
/// (`(nodeId, resumeValue)`), an `interrupt.requested` is answered as soon as it is read.
pub(crate) async fn follow_run(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    workflow: &str,
    resolve: Option<&(&str, Value)>,
) -> Fallible<Followed> {
    let sent = Instant::now();
    let run_id = create_run(http, base, key, workflow).await?;
    let created = Instant::now();
    let mut cursor = -1i64;
    loop {
        let page = poll(http, base, key, &run_id, cursor).await?;
        if page["isComplete"] == true {
            let status = page["runStatus"].as_str().unwrap_or("unknown").to_owned();
            return Ok(Followed { sent, created, terminal: Instant::now(), status, run_id });
        }
        if let (true, Some((node, value))) = (asks_interrupt(&page), resolve) {
            let url = format!("{base}/v1/runs/{run_id}/interrupts/{node}");
            json_of(http.post(url).json(&json!({ "resumeValue": value })), key, "resolve").await?;
        }
        cursor = page["lastEventSeq"].as_i64().unwrap_or(cursor);
    }
}

/// Creates a run of `workflow` and long-polls it until it asks for an interrupt (it is then
/// parked); its id. A run that ends first is an error.
#[allow(dead_code)]
pub(crate) async fn park_run(http: &reqwest::Client, base: &str, key: &str, workflow: &str) -> Fallible<String> {
    let run_id = create_run(http, base, key, workflow).await?;
    let mut cursor = -1i64;
    loop {
        let page = poll(http, base, key, &run_id, cursor).await?;
        if asks_interrupt(&page) {
            return Ok(run_id);
        }
        if page["isComplete"] == true {
            return Err(BenchError::new("run_not_completed", format!("run {run_id} ended instead of parking")));
        }
        cursor = page["lastEventSeq"].as_i64().unwrap_or(cursor);
    }
}
