//! `trellis-bench-http`: the cost of `core.http.request` against `core.noop`, in one session
//! of one host. Starts a loopback HTTP server in this process (200 with a small JSON body at
//! once on `/ok`, the same after `--delay-ms` on `/slow`) and `trellis serve` with
//! `--http-allow-private-nets 127.0.0.1/32`, then measures:
//!
//! 1. a `--length`-node `core.noop` chain and a `--length`-node chain of GETs of `/ok`, each
//!    driven by `--clients` clients for `--runs` runs: steps/s, create→terminal p50/p99, and
//!    CPU per step of the host and (separately) of this process, which runs the clients and
//!    the server;
//! 2. `--burst` runs of one GET of `/slow` created at once: first create to last terminal
//!    (about `--delay-ms` when attempts run concurrently) and the CPU used.
//!
//! CPU is utime + stime of `/proc/<pid>/stat` before and after each scenario. Prints
//! figures; asserts nothing.

#[path = "../error.rs"]
mod error;
#[path = "../follow.rs"]
mod follow;
mod host;
mod load;
#[path = "../procfs.rs"]
#[allow(dead_code)] // the throughput bench's readers it does not use
mod procfs;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::json;
use trellis_testkit::http_server::{Reply, TestServer};

use crate::load::Figures;
use crate::procfs::{CpuSample, CpuUsed};

/// Benchmark `core.http.request` on the embedded host.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench-http")]
struct Args {
    /// The trellis binary to start.
    #[arg(long, default_value = "target/release/trellis")]
    trellis: PathBuf,
    /// Concurrent clients for the chains.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Runs per chain.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Nodes per chain.
    #[arg(long, default_value_t = 10)]
    length: usize,
    /// Runs of the slow call created at once.
    #[arg(long, default_value_t = 100)]
    burst: usize,
    /// How long the server takes to answer the slow call, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    delay_ms: u64,
    /// Benchmark an in-memory host instead of the durable data directory.
    #[arg(long)]
    memory: bool,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// `used` divided by `count`, in µs, or `n/a` when `/proc` was not readable.
fn per(used: Option<Duration>, count: usize) -> String {
    used.map_or_else(|| "n/a".to_owned(), |cpu| format!("{:.1}", cpu.as_secs_f64() * 1e6 / count.max(1) as f64))
}

fn total(used: Option<Duration>) -> String {
    used.map_or_else(|| "n/a".to_owned(), |cpu| format!("{:.0} ms", ms(cpu)))
}

fn chain_row(report: &mut String, name: &str, length: usize, figures: &Figures, cpu: &CpuUsed) {
    let steps = figures.runs * length;
    let seconds = figures.wall.as_secs_f64().max(f64::EPSILON);
    let _ = writeln!(
        report,
        "{:<14} {:>5} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>15} {:>16}",
        name,
        figures.runs,
        figures.completed,
        figures.runs as f64 / seconds,
        steps as f64 / seconds,
        ms(figures.percentile(0.50)),
        ms(figures.percentile(0.99)),
        per(cpu.host, steps),
        per(cpu.bench, steps),
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let server = TestServer::start().await;
    let body = json!({"ok": true, "items": [1, 2, 3]});
    server.route("/ok", vec![Reply::json(200, &body)]);
    server.route("/slow", vec![Reply::json(200, &body).delay(Duration::from_millis(args.delay_ms))]);

    let workdir = tempfile::tempdir().expect("temp dir");
    let workflows = workdir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflow dir");
    let definitions = [
        load::noop_chain("bench-noop-chain", args.length),
        load::http_chain("bench-http-chain", args.length, &server.url("/ok")),
        load::http_chain("bench-http-slow", 1, &server.url("/slow")),
    ];
    for definition in &definitions {
        let id = definition["id"].as_str().unwrap_or_default();
        std::fs::write(workflows.join(format!("{id}.json")), definition.to_string()).expect("write workflow");
    }
    let host = host::start(&args.trellis, &workflows, workdir.path(), args.memory).await;
    let pid = host.pid();

    let mut report = String::new();
    let mode = if args.memory { "--memory" } else { "durable data dir (SQLite WAL, synchronous=FULL)" };
    let _ = writeln!(
        report,
        "trellis-bench-http: {mode}, host with --http-allow-private-nets 127.0.0.1/32, local server {} in the bench process",
        server.addr()
    );
    let _ = writeln!(report, "start-up to first discovery answer: {:.1} ms", ms(host.startup));
    let _ = writeln!(
        report,
        "chains of {} nodes, {} clients, {} runs each (CPU per step: utime+stime / steps)",
        args.length, args.clients, args.runs
    );
    let _ = writeln!(
        report,
        "{:<14} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>15} {:>16}",
        "scenario",
        "runs",
        "completed",
        "runs/s",
        "steps/s",
        "p50 ms",
        "p99 ms",
        "host CPU µs/step",
        "bench CPU µs/step"
    );
    for (name, workflow) in [("noop chain", "bench-noop-chain"), ("http chain", "bench-http-chain")] {
        let before = CpuSample::now(pid);
        let figures = load::clients(&host.base, workflow, args.clients, args.runs).await;
        let cpu = CpuSample::now(pid).since(&before);
        chain_row(&mut report, name, args.length, &figures, &cpu);
    }

    let before = CpuSample::now(pid);
    let figures = load::burst(&host.base, "bench-http-slow", args.burst).await;
    let cpu = CpuSample::now(pid).since(&before);
    let _ = writeln!(
        report,
        "burst: {} runs created at once, each one GET answered after {} ms",
        figures.runs, args.delay_ms
    );
    let _ = writeln!(
        report,
        "  first create -> last create answered: {:.1} ms; -> last terminal: {:.1} ms; create -> terminal p50 {:.1} ms, p99 {:.1} ms; completed {}/{}",
        ms(figures.creates),
        ms(figures.wall),
        ms(figures.percentile(0.50)),
        ms(figures.percentile(0.99)),
        figures.completed,
        figures.runs
    );
    let _ = writeln!(
        report,
        "  host CPU {} ({} µs per run); bench CPU {} ({} µs per run)",
        total(cpu.host),
        per(cpu.host, figures.runs),
        total(cpu.bench),
        per(cpu.bench, figures.runs)
    );
    let _ = writeln!(report, "requests the local server answered: {}", server.requests().len());
    match pid.and_then(|pid| procfs::status_kib(pid, "VmHWM")) {
        Some(kib) => {
            let _ = writeln!(report, "peak RSS of the host: {:.1} MiB", kib as f64 / 1024.0);
        }
        None => {
            let _ = writeln!(report, "peak RSS of the host: not readable on this system");
        }
    }
    drop(host);
    print!("{report}");
}
