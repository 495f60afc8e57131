//! `trellis-bench`: drives an OpenWOP host over HTTP with N closed-loop clients (create →
//! long-poll to terminal) and reports throughput, latency and the **host's own CPU** per
//! step (from its `/proc/<pid>/stat`, so figures compare across runs on a busy machine);
//! snapshot-read cost; and memory with parked runs and open SSE streams. It starts
//! `trellis serve` itself (`--host-bin`, durable `--data-dir` or `--memory`) or attaches to a
//! running host (`--attach URL --host-pid PID`). `--mode fan-out` measures parallel fan-out
//! (`vendor.trellis.forEach`, parallel `core.dispatch`; see [`fanout`]). Prints figures;
//! asserts nothing. See `docs/benchmarks.md`.

mod driver;
mod error;
mod fanout;
mod fanout_shapes;
mod follow;
mod forks;
mod host;
mod procfs;
mod prune;
mod report;
mod rss;
mod scenarios;
mod snapshots;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};
use crate::host::{Host, Target};

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Steps/s, runs/s, latency and host CPU per step for each scenario.
    Throughput,
    /// Host CPU per `GET /v1/runs/{id}` of a finished chain-10 and chain-500 run.
    Snapshots,
    /// Host VmRSS/VmHWM with runs parked and SSE streams open.
    Rss,
    /// The three, each on a freshly started host.
    All,
    /// Wall time, host CPU, peak concurrency and memory of a 1,000-child parallel fan-out
    /// (forEach over noop and 20 ms delay children, parallel dispatch), maxConcurrency 50,
    /// each case on a freshly started host. Not part of `all`.
    FanOut,
    /// `POST :fork` latency, time to terminal and host CPU per replay fork of a finished
    /// chain-500 run (about 1,000 events), `--runs` forks one at a time. Not part of `all`.
    Forks,
    /// Runs deleted per second by `POST /v1/runs:prune` of `--runs` finished chain-10 runs,
    /// and host CPU per deleted run. Not part of `all`.
    Prune,
}

/// Benchmark an OpenWOP host (by default a `trellis serve` it starts).
#[derive(Debug, Parser)]
#[command(name = "trellis-bench")]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Mode::Throughput)]
    mode: Mode,
    /// The trellis binary to start.
    #[arg(long, alias = "trellis", default_value = "target/release/trellis")]
    host_bin: PathBuf,
    /// Data directory of a started durable host (each mode uses `<dir>/<mode>`; default: a
    /// fresh temporary directory).
    #[arg(long, conflicts_with = "memory")]
    data_dir: Option<PathBuf>,
    /// Start the host with `--memory` instead of a durable data directory.
    #[arg(long)]
    memory: bool,
    /// Drive a host already serving at this URL instead of starting one. It must know the
    /// benchmark's workflows (`--write-workflows`).
    #[arg(long, value_name = "URL")]
    attach: Option<String>,
    /// The attached host's pid, for its CPU and memory figures.
    #[arg(long, requires = "attach")]
    host_pid: Option<u32>,
    /// The attached host's API key.
    #[arg(long, env = "TRELLIS_API_KEY", default_value = host::KEY)]
    key: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Measured runs per scenario (rounded up to a multiple of `--clients`).
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Measured runs of chain-500.
    #[arg(long, default_value_t = 40)]
    long_runs: usize,
    /// Unmeasured warm-up runs per scenario (default: one per client).
    #[arg(long)]
    warmup: Option<usize>,
    /// Scenarios to drive, comma-separated (chain-10, chain-50, chain-500, fan-out-8,
    /// approval, dispatch-3; default: all). In `--mode fan-out`: the cases, in the order
    /// given, a name may repeat (forEach-noop, forEach-delay-20ms, dispatch-parallel-noop).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Snapshot reads of each finished run.
    #[arg(long, default_value_t = 1000)]
    reads: usize,
    /// Runs parked at the approval gate (rss mode).
    #[arg(long, default_value_t = 1000)]
    parked: usize,
    /// SSE streams opened on parked runs (rss mode).
    #[arg(long, default_value_t = 200)]
    streams: usize,
    /// Seconds the streams stay open before memory is read (rss mode).
    #[arg(long, default_value_t = 3.0)]
    quiet_secs: f64,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to this file (the tables still print).
    #[arg(long, value_name = "PATH")]
    json_out: Option<PathBuf>,
    /// Write the benchmark's workflows into DIR (for a host started with `--workflows DIR`)
    /// and exit.
    #[arg(long, value_name = "DIR")]
    write_workflows: Option<PathBuf>,
}

impl Args {
    fn target(&self) -> Target {
        match &self.attach {
            Some(base) => Target::Attach { base: base.clone(), pid: self.host_pid, key: self.key.clone() },
            None => Target::Start { bin: self.host_bin.clone(), data_dir: self.data_dir.clone(), memory: self.memory },
        }
    }

    fn chosen(&self) -> Fallible<Vec<scenarios::Scenario>> {
        if self.scenarios.is_empty() {
            return Ok(scenarios::all());
        }
        self.scenarios
            .iter()
            .map(|name| {
                scenarios::named(name).ok_or_else(|| BenchError::new("workflow_missing", format!("no scenario {name}")))
            })
            .collect()
    }
}

fn host_json(host: &Host, args: &Args) -> Value {
    json!({
        "store": host.store,
        "hostBin": args.attach.is_none().then(|| args.host_bin.display().to_string()),
        "base": host.base,
        "pid": host.pid,
        "startupMs": host.startup.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0),
        "fsyncMs": host.fsync.map(|d| (d.as_secs_f64() * 1e5).round() / 100.0),
    })
}

fn header(out: &mut String, title: &str, host: &Host, clients: usize) {
    let what = match host.store {
        "durable" => "durable data dir (SQLite WAL, synchronous=FULL)",
        "memory" => "--memory",
        _ => "attached host",
    };
    let startup = host.startup.map(|d| format!(", start-up {:.1} ms", d.as_secs_f64() * 1000.0)).unwrap_or_default();
    let pid = host.pid.map_or_else(|| "no pid: no CPU/memory figures".to_owned(), |pid| format!("pid {pid}"));
    let fsync = host.fsync.map(|d| format!(", fsync {:.2} ms", d.as_secs_f64() * 1000.0)).unwrap_or_default();
    let load = procfs::load1().map_or_else(|| "n/a".to_owned(), |load| format!("{load:.2}"));
    let clients = if clients == 1 { "1 client".to_owned() } else { format!("{clients} clients") };
    let _ = writeln!(out, "trellis-bench {title}: {what}{fsync}, {pid}{startup}, {clients}, load1 {load}");
}

async fn run(args: &Args) -> Fallible<(String, Value)> {
    let target = args.target();
    let modes: Vec<Mode> = match args.mode {
        Mode::All => vec![Mode::Throughput, Mode::Snapshots, Mode::Rss],
        mode => vec![mode],
    };
    let mut text = String::new();
    let mut doc = json!({"bench": "trellis-bench", "clients": args.clients, "load1AtStart": procfs::load1()});
    for mode in modes {
        let label = match mode {
            Mode::Snapshots => "snapshots",
            Mode::Rss => "rss",
            Mode::Forks => "forks",
            Mode::Prune => "prune",
            Mode::FanOut => "fan-out",
            _ => "throughput",
        };
        if mode == Mode::FanOut {
            let mut rows = Vec::new();
            let mut hosts = Vec::new();
            let cases = if args.scenarios.is_empty() {
                fanout_shapes::CASES.to_vec()
            } else {
                let named = |name: &String| fanout_shapes::CASES.into_iter().find(|case| case.name == *name);
                args.scenarios
                    .iter()
                    .map(|name| {
                        named(name)
                            .ok_or_else(|| BenchError::new("workflow_missing", format!("no fan-out case {name}")))
                    })
                    .collect::<Fallible<Vec<_>>>()?
            };
            for (i, case) in cases.into_iter().enumerate() {
                let host = host::open(&target, &format!("fan-out-{i}-{}", case.name)).await?;
                if rows.is_empty() {
                    header(&mut text, label, &host, 1);
                }
                hosts.push(host_json(&host, args));
                rows.push(fanout::measure(&host, case).await?);
            }
            fanout::table(&mut text, &rows);
            doc[label] = json!({"hosts": hosts, "figures": fanout::to_json(&rows)});
            continue;
        }
        let host = host::open(&target, label).await?;
        let mut section = json!({"host": host_json(&host, args), "load1AtStart": procfs::load1()});
        header(&mut text, label, &host, args.clients);
        match mode {
            Mode::Snapshots => {
                let rows = snapshots::measure(&host, args.clients, args.reads).await?;
                report::snapshots_table(&mut text, &rows);
                section["figures"] = report::snapshots_json(&rows);
            }
            Mode::Prune => {
                let pruned = prune::measure(&host, args.clients, args.runs).await?;
                prune::table(&mut text, &pruned);
                section["figures"] = prune::to_json(&pruned);
            }
            Mode::Forks => {
                let measured = forks::measure(&host, args.runs).await?;
                forks::table(&mut text, &measured);
                section["figures"] = forks::to_json(&measured);
            }
            Mode::Rss => {
                let quiet = Duration::from_secs_f64(args.quiet_secs.max(0.0));
                let parked = rss::measure(&host, args.clients, args.parked, args.streams, quiet).await?;
                report::rss_table(&mut text, &parked);
                section["figures"] = report::rss_json(&parked);
            }
            _ => {
                let warmup = args.warmup.unwrap_or(args.clients);
                let mut rows = Vec::new();
                for scenario in args.chosen()? {
                    let runs = if scenario.nodes >= 500 { args.long_runs } else { args.runs };
                    rows.push(driver::measure(&host, &scenario, args.clients, runs, warmup).await?);
                }
                report::throughput_table(&mut text, &rows);
                section["figures"] = report::throughput_json(&rows);
                let peak = host.pid.and_then(|pid| procfs::status_kib(pid, "VmHWM"));
                let peak_mib = peak.map(|kib| (kib as f64 / 102.4).round() / 10.0);
                let shown = peak_mib.map_or_else(|| "n/a".to_owned(), |mib| format!("{mib:.1} MiB"));
                let _ = writeln!(text, "peak RSS of the host (VmHWM): {shown}");
                section["peakRssMiB"] = json!(peak_mib);
            }
        }
        drop(host);
        doc[label] = section;
    }
    Ok((text, doc))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Some(dir) = &args.write_workflows {
        if let Err(error) = scenarios::write_all(dir) {
            eprintln!("trellis-bench: {error}");
            std::process::exit(2);
        }
        return;
    }
    let (text, doc) = match run(&args).await {
        Ok(done) => done,
        Err(error) => {
            eprintln!("trellis-bench: {error}");
            std::process::exit(2);
        }
    };
    if args.json {
        println!("{doc:#}");
    } else {
        print!("{text}");
    }
    if let Some(path) = &args.json_out {
        if let Err(error) = std::fs::write(path, format!("{doc:#}\n")) {
            eprintln!("trellis-bench: io_failed: writing {}: {error}", path.display());
            std::process::exit(2);
        }
    }
}
