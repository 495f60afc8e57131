//! Prune rate: `count` finished `chain-10` runs (started by `clients` concurrent clients),
//! then `POST /v1/runs:prune {workflowId, keep: 0}` until nothing is left — runs deleted per
//! second, bytes freed, and the host's CPU per deleted run.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};
use crate::follow::{follow_run, json_of};
use crate::host::Host;
use crate::procfs::CpuSample;
use crate::scenarios;

/// What one prune measured.
pub(crate) struct Pruned {
    /// Runs deleted.
    pub(crate) runs: u64,
    /// Bytes they stored.
    pub(crate) bytes: u64,
    /// The prune calls, end to end.
    pub(crate) wall: Duration,
    /// Host CPU over them.
    pub(crate) host_cpu: Option<Duration>,
    /// Prune calls made.
    pub(crate) calls: u32,
}

/// Finishes `count` chain-10 runs, then prunes them all.
pub(crate) async fn measure(host: &Host, clients: usize, count: usize) -> Fallible<Pruned> {
    let http = reqwest::Client::new();
    let scenario = scenarios::named("chain-10")
        .ok_or_else(|| BenchError::new("workflow_missing", "no scenario chain-10".to_owned()))?;
    let per_client = count.div_ceil(clients.max(1));
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let (http, base, key) = (http.clone(), host.base.clone(), host.key.clone());
            tokio::spawn(async move {
                for _ in 0..per_client {
                    follow_run(&http, &base, &key, scenario.id, None).await?;
                }
                Ok::<_, BenchError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| BenchError::new("client_failed", format!("run task: {e}")))??;
    }
    let url = format!("{}/v1/runs:prune", host.base);
    let before = CpuSample::now(host.pid);
    let started = Instant::now();
    let (mut runs, mut bytes, mut calls) = (0u64, 0u64, 0u32);
    loop {
        let body = json!({"workflowId": scenario.id, "keep": 0});
        let report: Value = json_of(http.post(&url).json(&body), &host.key, "prune").await?;
        calls += 1;
        let deleted = report["deleted"].as_u64().unwrap_or_default();
        runs += deleted;
        bytes += report["bytes"].as_u64().unwrap_or_default();
        if deleted == 0 || report["truncated"] != true {
            break;
        }
    }
    let wall = started.elapsed();
    let host_cpu = CpuSample::now(host.pid).since(&before).host;
    Ok(Pruned { runs, bytes, wall, host_cpu, calls })
}

/// The table.
pub(crate) fn table(text: &mut String, pruned: &Pruned) {
    let rate = pruned.runs as f64 / pruned.wall.as_secs_f64().max(1e-9);
    let _ = writeln!(
        text,
        "pruned {} chain-10 runs ({} KiB) in {} call(s), {:.0} ms: {rate:.0} runs/s",
        pruned.runs,
        pruned.bytes / 1024,
        pruned.calls,
        pruned.wall.as_secs_f64() * 1000.0
    );
    let per_run = pruned.host_cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / pruned.runs.max(1) as f64);
    let _ = writeln!(
        text,
        "host CPU per deleted run: {}",
        per_run.map_or_else(|| "n/a".to_owned(), |us| format!("{us:.0} µs"))
    );
}

/// The JSON figures.
pub(crate) fn to_json(pruned: &Pruned) -> Value {
    json!({
        "runs": pruned.runs,
        "bytes": pruned.bytes,
        "calls": pruned.calls,
        "wallMs": pruned.wall.as_secs_f64() * 1000.0,
        "runsPerSecond": pruned.runs as f64 / pruned.wall.as_secs_f64().max(1e-9),
        "hostCpuUsPerRun": pruned.host_cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / pruned.runs.max(1) as f64),
    })
}
