//! One run driven the way a client drives it: create it, then long-poll its events until the
//! terminal page, resolving its interrupt when one is asked for. Shared by the benchmark
//! binaries.

use std::time::Instant;

use serde_json::{json, Value};

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
}

/// Creates a run of `workflow` with `key` and follows it to its end; with `resolve`
/// (`(nodeId, resumeValue)`), an `interrupt.requested` is answered as soon as it is read.
pub(crate) async fn follow_run(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    workflow: &str,
    resolve: Option<&(&str, Value)>,
) -> Followed {
    let sent = Instant::now();
    let created: Value = http
        .post(format!("{base}/v1/runs"))
        .bearer_auth(key)
        .json(&json!({"workflowId": workflow}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("create answer");
    let created_at = Instant::now();
    let run_id = created["runId"].as_str().unwrap_or_else(|| panic!("no runId in {created}")).to_owned();
    let mut cursor = -1i64;
    loop {
        let page: Value = http
            .get(format!("{base}/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=25"))
            .bearer_auth(key)
            .send()
            .await
            .expect("poll")
            .json()
            .await
            .expect("poll answer");
        if page["isComplete"] == true {
            let status = page["runStatus"].as_str().unwrap_or("unknown").to_owned();
            return Followed { sent, created: created_at, terminal: Instant::now(), status };
        }
        let asked =
            page["events"].as_array().is_some_and(|events| events.iter().any(|e| e["type"] == "interrupt.requested"));
        if let (true, Some((node, value))) = (asked, resolve) {
            let resolved = http
                .post(format!("{base}/v1/runs/{run_id}/interrupts/{node}"))
                .bearer_auth(key)
                .json(&json!({ "resumeValue": value }))
                .send()
                .await
                .expect("resolve");
            assert_eq!(resolved.status().as_u16(), 200, "benchmark resolutions must be accepted");
        }
        cursor = page["lastEventSeq"].as_i64().unwrap_or(cursor);
    }
}
