//! Starts the host, measures start-up, runs each scenario with concurrent clients, reads the
//! peak RSS, and formats the report.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scenarios::{self, Scenario};

const KEY: &str = "bench-key";

struct Figures {
    runs: usize,
    steps: usize,
    wall: Duration,
    latencies: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Follows one run to its end (see [`crate::follow`]); it must complete.
async fn one_run(http: &reqwest::Client, base: &str, workflow: &str, resolve: Option<&(&str, Value)>) -> Duration {
    let followed = crate::follow::follow_run(http, base, KEY, workflow, resolve).await;
    assert_eq!(followed.status, "completed", "benchmark runs must complete");
    followed.terminal - followed.sent
}

async fn drive(base: &str, scenario: &Scenario, clients: usize, runs: usize) -> Figures {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let per_client = runs.div_ceil(clients);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, base, id, resolve) = (http.clone(), base.to_owned(), scenario.id, scenario.resolve.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    latencies.push(one_run(&http, &base, id, resolve.as_ref()).await);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client task"));
    }
    let wall = started.elapsed();
    latencies.sort();
    Figures { runs: latencies.len(), steps: latencies.len() * scenario.nodes, wall, latencies }
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|line| line.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the whole benchmark and returns the report.
pub(crate) async fn run(trellis: &Path, memory: bool, clients: usize, runs: usize) -> String {
    let workdir = tempfile::tempdir().expect("temp dir");
    let workflows = workdir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflow dir");
    let scenarios = scenarios::all();
    for scenario in &scenarios {
        let path = workflows.join(format!("{}.json", scenario.id));
        std::fs::write(path, scenario.definition.to_string()).expect("write workflow");
    }
    std::fs::write(workflows.join("bench-worker.json"), scenarios::worker().to_string()).expect("write workflow");
    let mut command = Command::new(trellis);
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--workflows"])
        .arg(&workflows)
        .env("TRELLIS_API_KEY", KEY)
        // The dispatch scenario's scripted supervisor plan is honoured for a test-scope key.
        .env("OPENWOP_TEST_SEAM_ENABLED", "true")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if memory {
        command.arg("--memory");
    } else {
        command.arg("--data-dir").arg(workdir.path().join("data"));
    }
    let spawned = Instant::now();
    let mut child = command.spawn().expect("start trellis (build it with `cargo build --release -p trellis`)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    let base = line.trim().rsplit(' ').next().expect("address").to_owned();
    let http = reqwest::Client::new();
    while http.get(format!("{base}/.well-known/openwop")).send().await.map(|r| r.status().as_u16()).ok() != Some(200) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let startup = spawned.elapsed();

    let mut report = String::new();
    let mode = if memory { "--memory" } else { "durable data dir (SQLite WAL, synchronous=FULL)" };
    let _ = writeln!(report, "trellis-bench: {mode}, {clients} concurrent clients, {runs} runs per scenario");
    let _ = writeln!(report, "start-up to first discovery answer: {:.1} ms", startup.as_secs_f64() * 1000.0);
    let _ = writeln!(
        report,
        "{:<18} {:>6} {:>9} {:>10} {:>10} {:>10}",
        "scenario", "runs", "runs/s", "steps/s", "p50 ms", "p99 ms"
    );
    for scenario in &scenarios {
        let figures = drive(&base, scenario, clients, runs).await;
        let seconds = figures.wall.as_secs_f64();
        let _ = writeln!(
            report,
            "{:<18} {:>6} {:>9.1} {:>10.1} {:>10.1} {:>10.1}",
            scenario.id,
            figures.runs,
            figures.runs as f64 / seconds,
            figures.steps as f64 / seconds,
            percentile(&figures.latencies, 0.50).as_secs_f64() * 1000.0,
            percentile(&figures.latencies, 0.99).as_secs_f64() * 1000.0,
        );
    }
    match peak_rss_kib(child.id()) {
        Some(kib) => {
            let _ = writeln!(report, "peak RSS of the host: {:.1} MiB", kib as f64 / 1024.0);
        }
        None => {
            let _ = writeln!(report, "peak RSS of the host: not readable on this system");
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    report
}
