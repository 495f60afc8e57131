//! Reruns of a finished run of the model-call chain (`POST /v1/runs/{id}:rerun`, see
//! `trellis_core::cache`): `count` reruns with the result cache, one at a time, then `count`
//! without it, with the fake answering each call after a latency. For each: `:rerun` until
//! the rerun is terminal, the host's CPU, and the model calls the fake answered (none with
//! the cache when nothing changed).

use std::time::{Duration, Instant};

use serde_json::json;
use trellis_testkit::fake_model::FakeModel;

use crate::error::{BenchError, Fallible};
use crate::follow::{follow_run, json_of};
use crate::host::KEY;
use crate::procfs::{CpuSample, CpuUsed};

/// What `count` reruns measured.
pub(crate) struct Reruns {
    /// `POST :rerun` until the rerun is terminal, sorted.
    pub(crate) finished: Vec<Duration>,
    /// The CPU used over all of them.
    pub(crate) cpu: CpuUsed,
    /// The model calls the fake answered meanwhile.
    pub(crate) model_calls: usize,
}

/// Waits until `run_id` is terminal (long-polling its events); its status.
async fn until_terminal(http: &reqwest::Client, base: &str, run_id: &str) -> Fallible<String> {
    let mut cursor = -1i64;
    loop {
        let url = format!("{base}/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=5");
        let page = json_of(http.get(url), KEY, "poll").await?;
        if page["isComplete"] == true {
            return Ok(page["runStatus"].as_str().unwrap_or("unknown").to_owned());
        }
        cursor = page["lastEventSeq"].as_i64().unwrap_or(cursor);
    }
}

/// A finished run of `workflow` (its id), then `count` reruns of it with `use_cache`.
pub(crate) async fn measure(
    base: &str,
    pid: Option<u32>,
    model: &FakeModel,
    source: &str,
    count: usize,
    use_cache: bool,
) -> Fallible<Reruns> {
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/runs/{source}:rerun");
    let calls = model.request_count();
    let before = CpuSample::now(pid);
    let mut finished = Vec::with_capacity(count);
    for _ in 0..count {
        let sent = Instant::now();
        let rerun = json_of(http.post(&url).json(&json!({ "useCache": use_cache })), KEY, "rerun").await?;
        let run_id = rerun["runId"].as_str().unwrap_or_default().to_owned();
        let status = until_terminal(&http, base, &run_id).await?;
        finished.push(sent.elapsed());
        if status != "completed" {
            return Err(BenchError::new("rerun_failed", format!("rerun {run_id} ended {status}")));
        }
    }
    let cpu = CpuSample::now(pid).since(&before);
    finished.sort();
    Ok(Reruns { finished, cpu, model_calls: model.request_count() - calls })
}

/// The source run the reruns repeat: one run of `workflow`, completed.
pub(crate) async fn source(base: &str, workflow: &str) -> Fallible<String> {
    let http = reqwest::Client::new();
    let followed = follow_run(&http, base, KEY, workflow, None).await?;
    if followed.status != "completed" {
        return Err(BenchError::new("source_failed", format!("the source ended {}", followed.status)));
    }
    Ok(followed.run_id)
}
