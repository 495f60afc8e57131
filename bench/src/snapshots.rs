//! Snapshot reads: one finished run of a 10-node and of a 500-node chain, then `reads`
//! `GET /v1/runs/{id}` of each (by `clients` readers), with the host's CPU per read. A
//! snapshot read that does not depend on the run's length costs the same for both.

use std::time::{Duration, Instant};

use crate::driver::percentile;
use crate::error::{BenchError, Fallible};
use crate::host::Host;
use crate::procfs::{self, CpuSample, CpuUsed};
use crate::scenarios;

/// Reads done before the measured window.
const WARMUP_READS: usize = 50;

/// What reading one run's snapshot measured.
pub(crate) struct Reads {
    /// The run's scenario.
    pub(crate) name: &'static str,
    /// Reads measured.
    pub(crate) reads: usize,
    /// Size of one snapshot document, in bytes.
    pub(crate) bytes: usize,
    /// The measured window.
    pub(crate) wall: Duration,
    /// Per read, sorted.
    pub(crate) latencies: Vec<Duration>,
    /// CPU used in the window.
    pub(crate) cpu: CpuUsed,
    /// The 1-minute load average at the end of the window.
    pub(crate) load: Option<f64>,
}

impl Reads {
    /// The `p` quantile of the latencies.
    pub(crate) fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }
}

/// One read of `url`: its latency and body size.
async fn read_once(http: &reqwest::Client, url: &str, key: &str) -> Fallible<(Duration, usize)> {
    let sent = Instant::now();
    let answer = http.get(url).bearer_auth(key).send().await.map_err(|e| BenchError::http("snapshot", e))?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(|e| BenchError::http("snapshot", e))?;
    if !status.is_success() {
        return Err(BenchError::new("unexpected_answer", format!("snapshot: {status}")));
    }
    Ok((sent.elapsed(), body.len()))
}

/// `count` reads of `url` by `clients` concurrent readers.
async fn read_many(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    clients: usize,
    count: usize,
) -> Fallible<Vec<(Duration, usize)>> {
    let per_client = count.div_ceil(clients.max(1));
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let (http, url, key) = (http.clone(), url.to_owned(), key.to_owned());
            tokio::spawn(async move {
                let mut done = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    done.push(read_once(&http, &url, &key).await?);
                }
                Ok::<_, BenchError>(done)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(count);
    for task in tasks {
        all.extend(task.await.map_err(|e| BenchError::new("client_failed", format!("reader task: {e}")))??);
    }
    Ok(all)
}

/// Finishes one run of each of `chain-10` and `chain-500`, then measures `reads` snapshot
/// reads of each.
pub(crate) async fn measure(host: &Host, clients: usize, reads: usize) -> Fallible<Vec<Reads>> {
    let http = reqwest::Client::new();
    let mut figures = Vec::new();
    for name in ["chain-10", "chain-500"] {
        let scenario =
            scenarios::named(name).ok_or_else(|| BenchError::new("workflow_missing", format!("no scenario {name}")))?;
        let run = crate::follow::follow_run(&http, &host.base, &host.key, scenario.id, None).await?;
        if run.status != "completed" {
            return Err(BenchError::new("run_not_completed", format!("the {name} run ended {}", run.status)));
        }
        let url = format!("{}/v1/runs/{}", host.base, run.run_id);
        read_many(&http, &url, &host.key, clients, WARMUP_READS).await?;
        let before = CpuSample::now(host.pid);
        let started = Instant::now();
        let done = read_many(&http, &url, &host.key, clients, reads).await?;
        let wall = started.elapsed();
        let cpu = CpuSample::now(host.pid).since(&before);
        let bytes = done.first().map_or(0, |(_, bytes)| *bytes);
        let mut latencies: Vec<Duration> = done.into_iter().map(|(latency, _)| latency).collect();
        latencies.sort();
        figures.push(Reads { name, reads: latencies.len(), bytes, wall, latencies, cpu, load: procfs::load1() });
    }
    Ok(figures)
}
