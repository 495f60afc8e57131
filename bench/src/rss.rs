//! Memory with work parked: `parked` runs waiting at an approval gate, then `streams`
//! Server-Sent Events streams (`GET /v1/runs/{id}/events`, `Accept: text/event-stream`,
//! the default `updates` mode) open on them, then the host's `VmRSS` and `VmHWM`, and the
//! host's CPU while the streams sit idle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{BenchError, Fallible};
use crate::host::Host;
use crate::procfs::{self, CpuSample, CpuUsed};
use crate::scenarios::PARKED;

/// Resident and peak resident memory of the host, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// `VmRSS`.
    pub(crate) rss_kib: Option<u64>,
    /// `VmHWM`.
    pub(crate) hwm_kib: Option<u64>,
}

impl Memory {
    fn of(pid: Option<u32>) -> Self {
        Self {
            rss_kib: pid.and_then(|pid| procfs::status_kib(pid, "VmRSS")),
            hwm_kib: pid.and_then(|pid| procfs::status_kib(pid, "VmHWM")),
        }
    }
}

/// What the memory mode measured.
pub(crate) struct Parked {
    /// Runs parked at the gate.
    pub(crate) parked: usize,
    /// Streams asked for.
    pub(crate) streams: usize,
    /// Streams still open when memory was read.
    pub(crate) open: usize,
    /// Before any run.
    pub(crate) idle: Memory,
    /// With the runs parked, before the streams.
    pub(crate) with_runs: Memory,
    /// With the runs parked and the streams open.
    pub(crate) with_streams: Memory,
    /// Host CPU while the streams sat open for `quiet`.
    pub(crate) quiet_cpu: CpuUsed,
    /// How long the quiet window was.
    pub(crate) quiet: Duration,
    /// The 1-minute load average at the end.
    pub(crate) load: Option<f64>,
}

/// Parks `count` runs with `clients` concurrent clients; their ids.
async fn park(host: &Host, clients: usize, count: usize) -> Fallible<Vec<String>> {
    let http = reqwest::Client::new();
    let per_client = count.div_ceil(clients.max(1));
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|client| {
            let (http, base, key) = (http.clone(), host.base.clone(), host.key.clone());
            let mine = per_client.min(count.saturating_sub(client * per_client));
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(mine);
                for _ in 0..mine {
                    ids.push(crate::follow::park_run(&http, &base, &key, PARKED).await?);
                }
                Ok::<_, BenchError>(ids)
            })
        })
        .collect();
    let mut ids = Vec::with_capacity(count);
    for task in tasks {
        ids.extend(task.await.map_err(|e| BenchError::new("client_failed", format!("parking task: {e}")))??);
    }
    Ok(ids)
}

/// Opens an SSE stream on each of `runs` and keeps reading it in its own task; returns once
/// every stream has sent its first bytes (the backlog). `open` counts streams not yet ended.
async fn open_streams(
    host: &Host,
    runs: &[String],
    open: &Arc<AtomicUsize>,
) -> Fallible<Vec<tokio::task::JoinHandle<()>>> {
    let http = reqwest::Client::new();
    let mut readers = Vec::with_capacity(runs.len());
    let mut first_bytes = Vec::with_capacity(runs.len());
    for run_id in runs {
        let mut answer = http
            .get(format!("{}/v1/runs/{run_id}/events", host.base))
            .bearer_auth(&host.key)
            .header("Accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| BenchError::http("open SSE stream", e))?;
        if !answer.status().is_success() {
            return Err(BenchError::new("unexpected_answer", format!("SSE stream: {}", answer.status())));
        }
        let (sent_first, got_first) = tokio::sync::oneshot::channel::<()>();
        let open = Arc::clone(open);
        open.fetch_add(1, Ordering::SeqCst);
        readers.push(tokio::spawn(async move {
            let mut sent_first = Some(sent_first);
            while let Ok(Some(_chunk)) = answer.chunk().await {
                if let Some(sent) = sent_first.take() {
                    let _ = sent.send(());
                }
            }
            open.fetch_sub(1, Ordering::SeqCst);
        }));
        first_bytes.push(got_first);
    }
    for got in first_bytes {
        got.await.map_err(|_| BenchError::new("unexpected_answer", "an SSE stream ended before sending anything"))?;
    }
    Ok(readers)
}

/// Parks `parked` runs, opens `streams` streams on the first of them, waits `quiet` with
/// the streams open, and reads memory and CPU.
pub(crate) async fn measure(
    host: &Host,
    clients: usize,
    parked: usize,
    streams: usize,
    quiet: Duration,
) -> Fallible<Parked> {
    let idle = Memory::of(host.pid);
    let runs = park(host, clients, parked).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_runs = Memory::of(host.pid);
    let open = Arc::new(AtomicUsize::new(0));
    let readers = open_streams(host, &runs[..streams.min(runs.len())], &open).await?;
    let before = CpuSample::now(host.pid);
    tokio::time::sleep(quiet).await;
    let quiet_cpu = CpuSample::now(host.pid).since(&before);
    let with_streams = Memory::of(host.pid);
    let still_open = open.load(Ordering::SeqCst);
    for reader in readers {
        reader.abort();
    }
    Ok(Parked {
        parked: runs.len(),
        streams: streams.min(runs.len()),
        open: still_open,
        idle,
        with_runs,
        with_streams,
        quiet_cpu,
        quiet,
        load: procfs::load1(),
    })
}
