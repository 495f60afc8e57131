//! Throughput: each scenario driven by N closed-loop clients (create → long-poll to the
//! terminal page, then the next run), after a warm-up that is not measured. The host's CPU
//! (from its own `/proc/<pid>/stat`, not this process's) is read before and after the
//! measured window, as is the machine's load.

use std::time::{Duration, Instant};

use crate::error::{BenchError, Fallible};
use crate::host::Host;
use crate::procfs::{self, CpuSample, CpuUsed};
use crate::scenarios::Scenario;

/// What one scenario measured.
pub(crate) struct Measured {
    /// The scenario's `--scenarios` name.
    pub(crate) name: &'static str,
    /// Nodes one run executes.
    pub(crate) nodes: usize,
    /// Runs measured.
    pub(crate) runs: usize,
    /// First create of the window to last terminal page.
    pub(crate) wall: Duration,
    /// Create sent → terminal page read, per run, sorted.
    pub(crate) latencies: Vec<Duration>,
    /// CPU used in the window.
    pub(crate) cpu: CpuUsed,
    /// The 1-minute load average before and after the window.
    pub(crate) load: (Option<f64>, Option<f64>),
}

impl Measured {
    /// Steps executed.
    pub(crate) fn steps(&self) -> usize {
        self.runs * self.nodes
    }

    /// The `p` quantile of the latencies.
    pub(crate) fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }
}

/// The `p` quantile of `sorted` (zero when empty).
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// What a client needs to start and follow runs of one scenario, owned so that each client
/// is its own task.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    workflow: &'static str,
    name: &'static str,
    resolve: Option<(&'static str, serde_json::Value)>,
}

impl Client {
    /// Follows one run to its end; it must complete.
    async fn one_run(&self) -> Fallible<Duration> {
        let followed =
            crate::follow::follow_run(&self.http, &self.base, &self.key, self.workflow, self.resolve.as_ref()).await?;
        if followed.status != "completed" {
            return Err(BenchError::new(
                "run_not_completed",
                format!("a {} run ended {} (benchmark runs must complete)", self.name, followed.status),
            ));
        }
        Ok(followed.terminal - followed.sent)
    }
}

/// `clients` clients running `per_client` runs each, back to back; the latencies, sorted.
async fn closed_loop(client: &Client, clients: usize, per_client: usize) -> Fallible<Vec<Duration>> {
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    latencies.push(client.one_run().await?);
                }
                Ok::<_, BenchError>(latencies)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(clients * per_client);
    for task in tasks {
        let latencies = task.await.map_err(|e| BenchError::new("client_failed", format!("client task: {e}")))?;
        all.extend(latencies?);
    }
    all.sort();
    Ok(all)
}

/// Warms `scenario` up with `warmup` runs (spread over the clients), then measures `runs`
/// runs (rounded up to a multiple of `clients`).
pub(crate) async fn measure(
    host: &Host,
    scenario: &Scenario,
    clients: usize,
    runs: usize,
    warmup: usize,
) -> Fallible<Measured> {
    let client = Client {
        http: reqwest::Client::new(),
        base: host.base.clone(),
        key: host.key.clone(),
        workflow: scenario.id,
        name: scenario.name,
        resolve: scenario.resolve.clone(),
    };
    let clients = clients.max(1);
    if warmup > 0 {
        closed_loop(&client, clients, warmup.div_ceil(clients)).await?;
    }
    let load_before = procfs::load1();
    let before = CpuSample::now(host.pid);
    let started = Instant::now();
    let latencies = closed_loop(&client, clients, runs.div_ceil(clients)).await?;
    let wall = started.elapsed();
    let cpu = CpuSample::now(host.pid).since(&before);
    Ok(Measured {
        name: scenario.name,
        nodes: scenario.nodes,
        runs: latencies.len(),
        wall,
        latencies,
        cpu,
        load: (load_before, procfs::load1()),
    })
}
